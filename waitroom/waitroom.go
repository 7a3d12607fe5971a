// Package waitroom holds the rules of a sale's waiting room: who is let through to the buy step,
// in which order and when. Buyers join a line; those who joined before the sale's start are
// shuffled by a lottery (a draw from an HMAC of the user under the activity's secret salt, so
// the order among them does not depend on when or how fast they joined), later joiners line up
// behind them, first come first served. The line moves at a fixed rate (Config.Admit) across
// every gateway: a joiner's admission time is fixed when the place is taken, and an admitted
// buyer may fetch the buy path until that time plus Config.Session. The line keeps the rate and
// the session of its first join (Terms): every gateway reads them from the line, so a gateway
// configured otherwise (a reload under way on another) moves nobody's turn.
//
// The line itself is kept by a store (Line): redisstore.Store for a sale on several nodes,
// localstore.Memory on one. Package linetest is the conformance suite every Line passes.
package waitroom

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/caddy-seckill/caddy-seckill/ratelimit"
)

// Defaults of a waiting room, what a shop running a sale of a few hundred items expects.
const (
	DefaultOpens   = 15 * time.Minute
	DefaultSession = 2 * time.Minute
	DefaultAdmit   = "200/s"
)

// Bounds of a waiting room's settings.
const (
	MinOpens   = time.Second
	MaxOpens   = 7 * 24 * time.Hour
	MinSession = time.Second
	MaxSession = 24 * time.Hour
	// MaxAdmitPerSecond bounds the rate: a line moving faster than this is no line.
	MaxAdmitPerSecond = 1_000_000
)

// ErrNotInLine is returned by Line.Place for a user who has not joined.
var ErrNotInLine = errors.New("not in the line")

// Line is the store role a waiting room needs: one line per activity, shared by every gateway
// of the sale. Implementations must be safe for concurrent use, and Join must be atomic and
// idempotent per user. The store's clock (Redis TIME, or the Memory's clock) decides whether a
// joiner is early.
type Line interface {
	// Join puts user in the activity's line with the terms t. A user already in it keeps the
	// place taken first (Place.Joined is then false). An unknown activity is
	// admission.ErrUnknownActivity.
	Join(ctx context.Context, activity, user string, t Terms) (Place, error)

	// Place reads user's place in the activity's line; ErrNotInLine when the user has not joined.
	Place(ctx context.Context, activity, user string) (Place, error)

	// Tally counts the activity's line at the store's clock: its length, its early joiners, and
	// for each lag asked the late joiners admitted by the store's clock less that lag.
	Tally(ctx context.Context, activity string, lags ...time.Duration) (Tally, error)
}

// Terms is what the store needs to place a joiner; Room.Terms builds it. The store knows the
// activity's start: a joiner before it is early. The first join's IntervalMS and SessionMS
// become the line's for good, and a later join's are ignored: an early joiner's turn is its rank
// times the line's interval, so a rate that changed under placed buyers would move them.
type Terms struct {
	// IntervalMS is the time between two admissions, in milliseconds (1000/rate per second).
	IntervalMS float64
	// SessionMS is how long an admitted buyer may buy, in milliseconds.
	SessionMS int64
	// Draw is the user's lottery draw in [0, 1), used when the joiner is early.
	Draw float64
}

// Place is a user's place in a line as the store read it.
type Place struct {
	Now    time.Time // the store's clock at the read
	Joined bool      // this call took the place (Join only)
	Early  bool      // joined before the start: in the lottery

	// Rank is the 0-based place in the whole line: early joiners first, in the order of their
	// draws, then late joiners in the order they joined. An early joiner's rank is not known
	// before the start (-1), as later early joiners may still draw ahead of it.
	Rank int64

	// Offset is a late joiner's admission time, in milliseconds after the start.
	Offset float64

	// EarlyCount is the number of early joiners (final once the start has passed), and
	// LateAdmitted the late joiners whose admission time has come by Now.
	EarlyCount   int64
	LateAdmitted int64

	// IntervalMS and SessionMS are the line's terms, its first join's; 0 for a line whose
	// store kept none (joined before they were kept), which moves at the room's own.
	IntervalMS float64
	SessionMS  int64
}

// Tally is a count of a whole line, for the metrics.
type Tally struct {
	Now          time.Time // the store's clock at the read
	Length       int64     // everyone who joined
	EarlyCount   int64     // early joiners
	LateAdmitted []int64   // per lag asked: the late joiners admitted by Now less the lag
	// IntervalMS and SessionMS are the line's terms (Place); 0 before its first join.
	IntervalMS float64
	SessionMS  int64
}

// State is where a buyer stands in the line.
type State string

// The states of the public contract (docs/api.md).
const (
	Waiting  State = "waiting"
	Admitted State = "admitted"
	Expired  State = "expired" // the session is over
	Closed   State = "closed"  // sold out or ended: nobody is let through any more
)

// Config is a waiting room's settings.
type Config struct {
	Opens   time.Duration // the line opens this long before the start
	Admit   ratelimit.Rate
	Session time.Duration // how long an admitted buyer may take to buy
	// ProofBits is the proof of work a join costs (pow.go): 0 for none, else MinProofBits to
	// MaxProofBits leading zero bits.
	ProofBits int
}

// ParseAdmit parses an admission rate "<n>/<period>" such as "200/s" or "6000/m".
func ParseAdmit(s string) (ratelimit.Rate, error) {
	if len(strings.Fields(s)) != 1 {
		return ratelimit.Rate{}, fmt.Errorf("admit %q: want <n>/<period>, such as 200/s", s)
	}
	r, err := ratelimit.ParseRate(s)
	if err != nil {
		return ratelimit.Rate{}, fmt.Errorf("admit %q: %w", s, err)
	}
	return r, nil
}

// Room is a validated waiting room.
type Room struct {
	cfg        Config
	intervalMS float64
}

// New validates cfg and returns its room; zero fields take the defaults.
func New(cfg Config) (*Room, error) {
	if cfg.Opens == 0 {
		cfg.Opens = DefaultOpens
	}
	if cfg.Admit.Events == 0 && cfg.Admit.Period == 0 {
		cfg.Admit, _ = ParseAdmit(DefaultAdmit)
	}
	if cfg.Session == 0 {
		cfg.Session = DefaultSession
	}
	switch {
	case cfg.Opens < MinOpens || cfg.Opens > MaxOpens:
		return nil, fmt.Errorf("opens %s: want %s to %s", cfg.Opens, MinOpens, MaxOpens)
	case cfg.Session < MinSession || cfg.Session > MaxSession:
		return nil, fmt.Errorf("session %s: want %s to %s", cfg.Session, MinSession, MaxSession)
	case cfg.Admit.Events <= 0 || cfg.Admit.Period <= 0:
		return nil, fmt.Errorf("admit %d/%s: want a positive rate", cfg.Admit.Events, cfg.Admit.Period)
	case cfg.ProofBits != 0 && (cfg.ProofBits < MinProofBits || cfg.ProofBits > MaxProofBits):
		return nil, fmt.Errorf("proof_of_work %d: want %d to %d bits", cfg.ProofBits, MinProofBits, MaxProofBits)
	}
	perSecond := float64(cfg.Admit.Events) * float64(time.Second) / float64(cfg.Admit.Period)
	if perSecond > MaxAdmitPerSecond {
		return nil, fmt.Errorf("admit %d/%s: at most %d per second", cfg.Admit.Events, cfg.Admit.Period, MaxAdmitPerSecond)
	}
	return &Room{cfg: cfg, intervalMS: 1000 / perSecond}, nil
}

// Config returns the room's settings, defaults filled in.
func (r *Room) Config() Config { return r.cfg }

// Opens returns when the line of a sale starting at start opens.
func (r *Room) Opens(start time.Time) time.Time { return start.Add(-r.cfg.Opens) }

// Terms returns the terms of user's join in an activity, with the activity's secret salt.
func (r *Room) Terms(activity, user, salt string) Terms {
	return Terms{IntervalMS: r.intervalMS, SessionMS: r.cfg.Session.Milliseconds(), Draw: Draw(activity, user, salt)}
}

// LineTerms returns the interval and the session a line with the terms intervalMS and sessionMS
// (Place's, Tally's) moves at: its own, or the room's when it kept none.
func (r *Room) LineTerms(intervalMS float64, sessionMS int64) (float64, time.Duration) {
	if intervalMS <= 0 || sessionMS <= 0 {
		return r.intervalMS, r.cfg.Session
	}
	return intervalMS, time.Duration(sessionMS) * time.Millisecond
}

// SameTerms reports whether the room moves at the line terms intervalMS and sessionMS, which a
// line that kept none (0) always does. The intervals are compared to a part in 10^9, as
// "200/s" and "12000/m" are one rate.
func (r *Room) SameTerms(intervalMS float64, sessionMS int64) bool {
	if intervalMS <= 0 || sessionMS <= 0 {
		return true
	}
	return math.Abs(intervalMS-r.intervalMS) <= 1e-9*r.intervalMS && sessionMS == r.cfg.Session.Milliseconds()
}

// FormatInterval writes the rate of a line moving one admission every intervalMS milliseconds
// as admit does: per second, minute or hour, whichever reads best.
func FormatInterval(intervalMS float64) string {
	switch {
	case intervalMS <= 1000:
		return fmt.Sprintf("%.6g/s", 1000/intervalMS)
	case intervalMS <= 60_000:
		return fmt.Sprintf("%.6g/m", 60_000/intervalMS)
	}
	return fmt.Sprintf("%.6g/h", 3_600_000/intervalMS)
}

// Draw is user's lottery draw in [0, 1): an HMAC of the activity and the user under the
// activity's secret salt, so a buyer cannot draw again (another join keeps the place) nor
// predict anyone's draw without the salt.
func Draw(activity, user, salt string) float64 {
	m := hmac.New(sha256.New, []byte(salt))
	m.Write([]byte("waitroom\x00"))
	m.Write([]byte(activity))
	m.Write([]byte{0})
	m.Write([]byte(user))
	sum := m.Sum(nil)
	// 53 bits: every value is exact in a float64 (Lua numbers and Redis scores are doubles).
	return float64(binary.BigEndian.Uint64(sum)>>11) / (1 << 53)
}

// Status is a buyer's answer to "where am I in the line".
type Status struct {
	State State
	// Position is the 1-based place in the whole line, fixed from the start on; 0 before the
	// start for an early joiner, whose place the lottery draws at the start.
	Position int64
	Ahead    int64         // buyers still waiting in front (0 unless waiting)
	ETA      time.Duration // until admission (waiting), an estimate before the start
	Refresh  time.Duration // when to ask again; 0 when there is nothing more to wait for
	// AdmittedAt and Until bound the session (admitted and expired).
	AdmittedAt, Until time.Time
}

// Refresh bounds: a poll every second at most, and at least every 15 s while waiting. A turn due
// in less than minRefresh is an exception: the buyer is told to ask again just after it
// (RefreshMargin), so that a page polling at refresh_ms is not a second behind a script that
// polls all the time.
const (
	minRefresh = time.Second
	maxRefresh = 15 * time.Second
	// RefreshMargin is how long after a turn due within a second the buyer is told to ask again:
	// enough for the clocks of the gateways of a sale (each reads the store's) and the trip.
	RefreshMargin = 20 * time.Millisecond
)

// Status derives the buyer's status from the place the store read, for a sale starting at start.
// closed (sold out, or ended) overrides everything but a session already over.
func (r *Room) Status(p Place, start time.Time, closed bool) Status {
	now := p.Now
	interval, session := r.LineTerms(p.IntervalMS, p.SessionMS)
	at, known := admittedAt(p, start, interval)
	s := Status{}
	if known {
		s.Position = p.Rank + 1
	}
	switch {
	case known && !now.Before(at.Add(session)):
		s.State, s.AdmittedAt, s.Until = Expired, at, at.Add(session)
	case closed:
		s.State = Closed
	case known && !now.Before(at):
		s.State, s.AdmittedAt, s.Until = Admitted, at, at.Add(session)
		s.Refresh = clamp(s.Until.Sub(now)/4, minRefresh, maxRefresh)
	case known:
		s.State = Waiting
		s.Ahead = max(p.Rank-EarlyServed(p.EarlyCount, now.Sub(start), interval)-p.LateAdmitted, 0)
		s.ETA = at.Sub(now)
		s.Refresh = refreshFor(s.ETA)
	default: // an early joiner before the start
		s.State = Waiting
		s.ETA = max(start.Sub(now), 0) + time.Duration(float64(p.EarlyCount)*interval/2*float64(time.Millisecond))
		// The place is drawn at the start: ask again just after it.
		s.Refresh = refreshFor(max(start.Sub(now), 0))
	}
	return s
}

// refreshFor returns when to ask again about an event due in d: a quarter of the wait, 1 s to
// 15 s, but just after the event when it is due within a second.
func refreshFor(d time.Duration) time.Duration {
	if d < minRefresh {
		return d + RefreshMargin
	}
	return clamp(d/4, minRefresh, maxRefresh)
}

// admittedAt returns the place's admission time in a line moving every intervalMS, and false
// before the lottery is drawn.
func admittedAt(p Place, start time.Time, intervalMS float64) (time.Time, bool) {
	switch {
	case p.Early && p.Rank < 0:
		return time.Time{}, false
	case p.Early:
		return start.Add(msDuration(float64(p.Rank) * intervalMS)), true
	}
	return start.Add(msDuration(p.Offset)), true
}

// EarlyServed counts the early joiners admitted by since after the start in a line moving every
// intervalMS (LineTerms): rank k is admitted at start + k intervals.
func EarlyServed(early int64, since time.Duration, intervalMS float64) int64 {
	if since < 0 || early == 0 {
		return 0
	}
	n := int64(math.Floor(float64(since)/float64(time.Millisecond)/intervalMS)) + 1
	return min(n, early)
}

// IntervalMS is the time between two admissions in milliseconds.
func (r *Room) IntervalMS() float64 { return r.intervalMS }

func msDuration(ms float64) time.Duration {
	return time.Duration(math.Round(ms * float64(time.Millisecond)))
}

func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }
