-- A finished sale's orders and payment attempts, moved out of the hot tables by Archive (the
-- archive command) in short batches. Never written again; reconcile, Orders, Payments and the
-- order lookups read them with the hot rows. order_keys keeps the archived orders' keys, so a
-- redelivered win still finds its order and an order id its buyer.
CREATE TABLE orders_archive (
	id             text        PRIMARY KEY,
	reservation_id text        NOT NULL,
	activity       text        NOT NULL,
	user_id        text        NOT NULL,
	qty            bigint      NOT NULL,
	status         text        NOT NULL,
	created_at     timestamptz NOT NULL,
	expires_at     timestamptz NOT NULL,
	paid_at        timestamptz,
	cancelled_at   timestamptz,
	payment_ref    text,
	amount         bigint      NOT NULL,
	currency       text        NOT NULL,
	title          text        NOT NULL
);
CREATE INDEX orders_archive_activity ON orders_archive (activity);

CREATE TABLE payments_archive (
	key          text        PRIMARY KEY,
	order_id     text        NOT NULL,
	user_id      text        NOT NULL,
	activity     text        NOT NULL,
	attempt      integer     NOT NULL,
	amount       bigint      NOT NULL,
	currency     text        NOT NULL,
	status       text        NOT NULL,
	provider_ref text        NOT NULL,
	created_at   timestamptz NOT NULL,
	updated_at   timestamptz NOT NULL
);
CREATE INDEX payments_archive_activity ON payments_archive (activity);
