-- The database's own stock counter: the last guard against overselling.
-- "left" is a keyword and stays quoted everywhere. Times are Unix milliseconds.
CREATE TABLE stock (
	activity TEXT    PRIMARY KEY,
	total    INTEGER NOT NULL CHECK (total >= 0),
	"left"   INTEGER NOT NULL CHECK ("left" >= 0 AND "left" <= total)
) STRICT;

CREATE TABLE orders (
	id             TEXT    PRIMARY KEY,
	reservation_id TEXT    NOT NULL,
	activity       TEXT    NOT NULL REFERENCES stock (activity),
	user_id        TEXT    NOT NULL,
	qty            INTEGER NOT NULL CHECK (qty > 0),
	status         TEXT    NOT NULL CHECK (status IN ('pending_payment', 'paid', 'cancelled')),
	created_at     INTEGER NOT NULL,
	expires_at     INTEGER NOT NULL,
	paid_at        INTEGER,
	cancelled_at   INTEGER,
	payment_ref    TEXT,
	-- One order per win: a redelivered queue entry finds the order it already made.
	UNIQUE (activity, reservation_id)
) STRICT;

CREATE INDEX orders_pending_expiry ON orders (expires_at) WHERE status = 'pending_payment';
CREATE INDEX orders_activity_user ON orders (activity, user_id);

-- Store-side effects of committed changes, written in the same transaction as the change and
-- deleted by the relay once done.
CREATE TABLE outbox (
	id             INTEGER PRIMARY KEY AUTOINCREMENT,
	activity       TEXT    NOT NULL,
	reservation_id TEXT    NOT NULL,
	kind           TEXT    NOT NULL CHECK (kind IN ('release', 'paid')),
	created_at     INTEGER NOT NULL
) STRICT;
