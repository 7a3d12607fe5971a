-- The database's own stock counter: the last guard against overselling.
-- "left" is a reserved word and stays quoted everywhere.
CREATE TABLE stock (
	activity text   PRIMARY KEY,
	total    bigint NOT NULL CHECK (total >= 0),
	"left"   bigint NOT NULL CHECK ("left" >= 0 AND "left" <= total)
);

CREATE TABLE orders (
	id             text        PRIMARY KEY,
	reservation_id text        NOT NULL,
	activity       text        NOT NULL REFERENCES stock (activity),
	user_id        text        NOT NULL,
	qty            bigint      NOT NULL CHECK (qty > 0),
	status         text        NOT NULL CHECK (status IN ('pending_payment', 'paid', 'cancelled')),
	created_at     timestamptz NOT NULL,
	expires_at     timestamptz NOT NULL,
	paid_at        timestamptz,
	cancelled_at   timestamptz,
	payment_ref    text,
	-- One order per win: a redelivered queue entry finds the order it already made.
	UNIQUE (activity, reservation_id)
);

-- The sweeper's scan: only pending orders, by expiry.
CREATE INDEX orders_pending_expiry ON orders (expires_at) WHERE status = 'pending_payment';
CREATE INDEX orders_activity_user ON orders (activity, user_id);

-- Store-side effects of committed changes (release a cancelled reservation, publish a result),
-- written in the same transaction as the change and deleted by the relay once done.
CREATE TABLE outbox (
	id             bigserial   PRIMARY KEY,
	activity       text        NOT NULL,
	reservation_id text        NOT NULL,
	kind           text        NOT NULL CHECK (kind IN ('release', 'paid')),
	created_at     timestamptz NOT NULL
);
