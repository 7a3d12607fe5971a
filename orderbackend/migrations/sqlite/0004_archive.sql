-- A finished sale's orders and payment attempts, moved out of the hot tables by Archive (the
-- archive command) in short batches. Never written again; reconcile, Orders, Payments and the
-- order lookups read them with the hot rows. Times are Unix milliseconds.
CREATE TABLE orders_archive (
	id             TEXT    PRIMARY KEY,
	reservation_id TEXT    NOT NULL,
	activity       TEXT    NOT NULL,
	user_id        TEXT    NOT NULL,
	qty            INTEGER NOT NULL,
	status         TEXT    NOT NULL,
	created_at     INTEGER NOT NULL,
	expires_at     INTEGER NOT NULL,
	paid_at        INTEGER,
	cancelled_at   INTEGER,
	payment_ref    TEXT,
	amount         INTEGER NOT NULL,
	currency       TEXT    NOT NULL,
	title          TEXT    NOT NULL,
	UNIQUE (activity, reservation_id)
) STRICT;

CREATE TABLE payments_archive (
	key          TEXT    PRIMARY KEY,
	order_id     TEXT    NOT NULL,
	activity     TEXT    NOT NULL,
	attempt      INTEGER NOT NULL,
	amount       INTEGER NOT NULL,
	currency     TEXT    NOT NULL,
	status       TEXT    NOT NULL,
	provider_ref TEXT    NOT NULL,
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX payments_archive_activity ON payments_archive (activity);
