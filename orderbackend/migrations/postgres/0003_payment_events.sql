-- The payment providers' notifications (webhooks) already stored: a provider delivers an event at
-- least once and in any order, so its event id makes a replay find its row and change nothing.
-- payment_key is the attempt the event was about (payments.key); outcome what it said
-- ('succeeded', 'failed' or 'pending'). A notification of an unknown attempt is refused and not
-- stored, so every row names an attempt that exists.
CREATE TABLE payment_events (
	provider    text        NOT NULL,
	event_id    text        NOT NULL,
	payment_key text        NOT NULL,
	outcome     text        NOT NULL CHECK (outcome IN ('succeeded', 'failed', 'pending')),
	received_at timestamptz NOT NULL,
	PRIMARY KEY (provider, event_id)
);

CREATE INDEX payment_events_key ON payment_events (payment_key);
