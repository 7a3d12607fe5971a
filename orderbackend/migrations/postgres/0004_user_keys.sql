-- Keys that work when orders, payments and outbox rows are found by their buyer (user_id): the
-- orders table may be PARTITION BY HASH (user_id) (the partitions option, postgres_partition.go),
-- and a partitioned table's unique keys must contain user_id.

-- The reservation-duplicate guard, unpartitioned: one row per order, keyed by the win's
-- reservation. Creating an order inserts its key here first (ON CONFLICT DO NOTHING), so a
-- redelivered win finds its order whatever partition holds it; order_id -> user_id is how a call
-- that has only an order id or a payment key (the sweeper, a provider's notification) finds the
-- one partition to read.
CREATE TABLE order_keys (
	activity       text NOT NULL,
	reservation_id text NOT NULL,
	order_id       text NOT NULL UNIQUE,
	user_id        text NOT NULL,
	PRIMARY KEY (activity, reservation_id)
);
INSERT INTO order_keys (activity, reservation_id, order_id, user_id)
	SELECT activity, reservation_id, id, user_id FROM orders;

-- Payment attempts carry their order's buyer, the partition key they share with it.
ALTER TABLE payments ADD COLUMN user_id text;
UPDATE payments p SET user_id = o.user_id FROM orders o WHERE o.id = p.order_id;
ALTER TABLE payments ALTER COLUMN user_id SET NOT NULL;

-- Outbox rows name their order and buyer, so the relay reads them without a join over every
-- partition of orders.
ALTER TABLE outbox ADD COLUMN order_id text;
ALTER TABLE outbox ADD COLUMN user_id text;
UPDATE outbox b SET order_id = o.id, user_id = o.user_id
	FROM orders o WHERE o.activity = b.activity AND o.reservation_id = b.reservation_id;
-- A row whose order is gone could never be relayed (the old join skipped it too).
DELETE FROM outbox WHERE order_id IS NULL;
ALTER TABLE outbox ALTER COLUMN order_id SET NOT NULL;
ALTER TABLE outbox ALTER COLUMN user_id SET NOT NULL;

-- Settings of the schema that code, not a migration file, applies: partitions is the number of
-- hash partitions of orders and payments (1: plain tables, as the migrations before this one made).
CREATE TABLE schema_settings (
	name  text PRIMARY KEY,
	value text NOT NULL
);
INSERT INTO schema_settings (name, value) VALUES ('partitions', '1');
