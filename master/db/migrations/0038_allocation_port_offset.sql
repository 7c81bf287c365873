-- The port offset of each allocation's containers (DET_UNIQUE_PORT_OFFSET; a served task's port
-- is 2700 + it): chosen once, when the first container spec is built, among the offsets no other
-- live allocation on the same host holds (det.master.services.containers.port_offset). NULL
-- until then; allocations placed before this get theirs at their next spec build.
ALTER TABLE allocations ADD COLUMN port_offset integer
    CHECK (port_offset >= 0 AND port_offset < 1000);
