"""The WebUI's files: ``index.html``, ``app.css`` and one script per area of the app, served by
``det.master.api.webui`` under ``/det/`` (docs/internals.md, "WebUI")."""
