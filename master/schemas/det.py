"""det's own messages: routes and fields Determined does not have, in the style of
:mod:`det.master.schemas._determined` (``TypedDict``, camelCase wire names, det's limit aliases).
"""

from __future__ import annotations
