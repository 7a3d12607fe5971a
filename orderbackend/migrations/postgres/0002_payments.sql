-- What an order costs (unit price x qty, in the currency's minor units; 0 and '' when the activity
-- has no price) and the activity's title, fixed when the order is made.
ALTER TABLE orders ADD COLUMN amount bigint NOT NULL DEFAULT 0 CHECK (amount >= 0);
ALTER TABLE orders ADD COLUMN currency text NOT NULL DEFAULT '';
ALTER TABLE orders ADD COLUMN title text NOT NULL DEFAULT '';

-- A payment attempt, written BEFORE the provider is called, so that a charge whose answer was lost
-- (a crash, a timeout) can be settled by asking the provider under the same key. key is the
-- idempotency key every provider call of the attempt carries: order id, '-', attempt number.
-- orders.payment_ref names the attempt that paid the order.
CREATE TABLE payments (
	key          text        PRIMARY KEY,
	order_id     text        NOT NULL REFERENCES orders (id),
	attempt      integer     NOT NULL CHECK (attempt > 0),
	amount       bigint      NOT NULL CHECK (amount >= 0),
	currency     text        NOT NULL,
	status       text        NOT NULL CHECK (status IN ('started', 'failed', 'succeeded', 'refund_due', 'refunded')),
	provider_ref text        NOT NULL DEFAULT '',
	created_at   timestamptz NOT NULL,
	updated_at   timestamptz NOT NULL,
	UNIQUE (order_id, attempt)
);

-- The sweeper's scan: attempts without outcome and charges to give back.
CREATE INDEX payments_open ON payments (updated_at) WHERE status IN ('started', 'refund_due');
