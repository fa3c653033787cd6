-- A registration held for a waiting-list offer records where it came from. The value is
-- added alone: a new enum value is usable only once its transaction has committed.
ALTER TYPE event.state_origin ADD VALUE 'waitlist';
