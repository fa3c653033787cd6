-- /metrics counts the outbox by channel and delivery state at every scrape: an index-only
-- scan of this small index instead of a read of every message's text.
CREATE INDEX outbox_messages_channel_state_idx
    ON event.outbox_messages (channel, delivery_state);
