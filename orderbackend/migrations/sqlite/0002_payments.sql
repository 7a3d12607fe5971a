-- What an order costs (unit price x qty, in the currency's minor units; 0 and '' when the activity
-- has no price) and the activity's title, fixed when the order is made.
ALTER TABLE orders ADD COLUMN amount INTEGER NOT NULL DEFAULT 0 CHECK (amount >= 0);
ALTER TABLE orders ADD COLUMN currency TEXT NOT NULL DEFAULT '';
ALTER TABLE orders ADD COLUMN title TEXT NOT NULL DEFAULT '';

-- A payment attempt, written BEFORE the provider is called, so that a charge whose answer was lost
-- (a crash, a timeout) can be settled by asking the provider under the same key. key is the
-- idempotency key every provider call of the attempt carries: order id, '-', attempt number.
-- orders.payment_ref names the attempt that paid the order. Times are Unix milliseconds.
CREATE TABLE payments (
	key          TEXT    PRIMARY KEY,
	order_id     TEXT    NOT NULL REFERENCES orders (id),
	attempt      INTEGER NOT NULL CHECK (attempt > 0),
	amount       INTEGER NOT NULL CHECK (amount >= 0),
	currency     TEXT    NOT NULL,
	status       TEXT    NOT NULL CHECK (status IN ('started', 'failed', 'succeeded', 'refund_due', 'refunded')),
	provider_ref TEXT    NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL,
	UNIQUE (order_id, attempt)
) STRICT;

CREATE INDEX payments_open ON payments (updated_at) WHERE status IN ('started', 'refund_due');
