-- A managed trial's last reported training progress (POST /api/v1/trials/{id}/progress, a
-- fraction in [0, 1]): its share of its experiment's progress while it has not ended
-- (det.master.searcher.basic). NULL: never reported.
ALTER TABLE trials ADD COLUMN progress double precision CHECK (progress >= 0 AND progress <= 1);
