package localstore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// A change in the ring (ring.go) is its kind's fields packed as in a win_log row: each
// string as a uvarint length and its bytes, each number as a (u)varint. Only the fields the
// writer commits are packed, so a change read back commits exactly what the original would have.

// appendChange packs c's fields onto b.
func appendChange(b []byte, c *memChange) ([]byte, error) {
	switch c.kind {
	case changeDefine:
		d := &c.def
		b = appendString(b, d.ID)
		b = binary.AppendVarint(b, d.Stock)
		b = binary.AppendVarint(b, d.Limit)
		b = binary.AppendVarint(b, d.Start.UnixMilli())
		b = binary.AppendVarint(b, d.End.UnixMilli())
		b = binary.AppendVarint(b, d.PayWithin.Milliseconds())
		return appendString(b, d.Salt), nil
	case changeDelete:
		return appendString(b, c.act), nil
	case changeWin:
		return appendWin(b, c.act, c.idx, &c.entry, c.remaining), nil
	case changeRelease:
		b = appendString(b, c.act)
		return appendString(b, c.entry.id), nil
	case changeResult:
		r := &c.result
		b = appendString(b, c.act)
		b = appendString(b, c.user)
		b = appendString(b, r.Code)
		b = appendString(b, r.ReservationID)
		b = appendString(b, r.OrderID)
		b = binary.AppendVarint(b, r.PayBeforeMS)
		b = binary.AppendUvarint(b, uint64(c.idx))
		resvs := ""
		if r.Reservations != nil {
			j, err := json.Marshal(r.Reservations)
			if err != nil {
				return b, fmt.Errorf("result %s/%s: %w", c.act, c.user, err)
			}
			resvs = string(j)
		}
		return appendString(b, resvs), nil
	case changeGroup:
		b = appendString(b, c.act)
		return appendString(b, c.group), nil
	case changePending:
		b = appendString(b, c.act)
		b = appendString(b, c.group)
		b = binary.AppendUvarint(b, uint64(c.idx))
		b = appendString(b, c.pend.consumer)
		b = binary.AppendVarint(b, c.pend.deliveries)
		return binary.AppendVarint(b, c.pend.at.UnixNano()), nil
	case changeNext, changeAck:
		b = appendString(b, c.act)
		b = appendString(b, c.group)
		return binary.AppendUvarint(b, uint64(c.idx)), nil
	case changeDead:
		b = appendString(b, c.act)
		b = appendString(b, c.group)
		b = binary.AppendUvarint(b, uint64(c.idx))
		b = binary.AppendVarint(b, c.pend.deliveries)
		return appendString(b, c.reason), nil
	case changeJoin:
		b = appendString(b, c.act)
		b = appendString(b, c.user)
		early := uint64(0)
		if c.early {
			early = 1
		}
		b = binary.AppendUvarint(b, early)
		b = binary.AppendUvarint(b, math.Float64bits(c.at))
		return binary.AppendUvarint(b, math.Float64bits(c.interval)), nil
	case changeDraw:
		return appendString(b, c.act), nil
	case changeTerms:
		b = appendString(b, c.act)
		b = binary.AppendUvarint(b, math.Float64bits(c.interval))
		return binary.AppendUvarint(b, math.Float64bits(c.at)), nil
	}
	return b, fmt.Errorf("unknown change kind %d", c.kind)
}

// errRingChange is a change in the ring that does not decode although its checksum matched:
// damage, or a ring written by another version, which the open refuses.
var errRingChange = errors.New("malformed change")

// decodeChange unpacks a change of kind k that appendChange packed into data.
func decodeChange(k changeKind, data []byte) (memChange, error) {
	d := winDecoder{b: data}
	c := memChange{kind: k}
	switch k {
	case changeDefine:
		a := &c.def
		a.ID = d.string()
		a.Stock, a.Limit = d.varint(), d.varint()
		a.Start, a.End = time.UnixMilli(d.varint()), time.UnixMilli(d.varint())
		a.PayWithin = time.Duration(d.varint()) * time.Millisecond
		a.Salt = d.string()
		c.act = a.ID
	case changeDelete:
		c.act = d.string()
	case changeWin:
		var w packedWin
		d.win(&w)
		c.act, c.idx, c.entry, c.remaining = w.act, w.idx, w.entry, w.remaining
	case changeRelease:
		c.act = d.string()
		c.entry.id = d.string()
	case changeResult:
		r := &c.result
		c.act, c.user = d.string(), d.string()
		r.Code, r.ReservationID, r.OrderID = d.string(), d.string(), d.string()
		r.PayBeforeMS = d.varint()
		c.idx = int(d.uvarint())
		if resvs := d.string(); resvs != "" && !d.err {
			if err := json.Unmarshal([]byte(resvs), &r.Reservations); err != nil {
				return c, fmt.Errorf("%w: result %s/%s: reservations: %w", errRingChange, c.act, c.user, err)
			}
		}
	case changeGroup:
		c.act, c.group = d.string(), d.string()
	case changePending:
		c.act, c.group = d.string(), d.string()
		c.idx = int(d.uvarint())
		c.pend.consumer = d.string()
		c.pend.deliveries = d.varint()
		c.pend.at = time.Unix(0, d.varint())
	case changeNext, changeAck:
		c.act, c.group = d.string(), d.string()
		c.idx = int(d.uvarint())
	case changeDead:
		c.act, c.group = d.string(), d.string()
		c.idx = int(d.uvarint())
		c.pend.deliveries = d.varint()
		c.reason = d.string()
	case changeJoin:
		c.act, c.user = d.string(), d.string()
		switch d.uvarint() {
		case 0:
		case 1:
			c.early = true
		default:
			d.err = true
		}
		c.at, c.interval = math.Float64frombits(d.uvarint()), math.Float64frombits(d.uvarint())
	case changeDraw:
		c.act = d.string()
	case changeTerms:
		c.act = d.string()
		c.interval, c.at = math.Float64frombits(d.uvarint()), math.Float64frombits(d.uvarint())
	default:
		return c, fmt.Errorf("%w: unknown kind %d", errRingChange, k)
	}
	if d.err {
		return c, fmt.Errorf("%w: kind %d: a field runs past its end", errRingChange, k)
	}
	if len(d.b) != 0 {
		return c, fmt.Errorf("%w: kind %d: %d bytes after its fields", errRingChange, k, len(d.b))
	}
	return c, nil
}
