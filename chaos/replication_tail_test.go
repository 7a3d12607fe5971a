package chaos

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestReplicationTail checks how the failover scenarios tell a win lost to asynchronous
// replication (the newest of its queue, made within replicationWindow of the fault) from a hole.
func TestReplicationTail(t *testing.T) {
	fault := time.UnixMilli(1_796_206_275_342)
	ms := func(before time.Duration) string { return strconv.FormatInt(fault.Add(-before).UnixMilli(), 10) }
	for _, tc := range []struct {
		name           string
		acked, missing []string
		buckets        int
		tail, holes    []string
	}{
		{"the newest entry's wins, 5 ms before", []string{ms(time.Second) + "-0-1", ms(5*time.Millisecond) + "-4-1", ms(5*time.Millisecond) + "-4-2"},
			[]string{ms(5*time.Millisecond) + "-4-1", ms(5*time.Millisecond) + "-4-2"}, 1,
			[]string{ms(5*time.Millisecond) + "-4-1", ms(5*time.Millisecond) + "-4-2"}, nil},
		{"the newest entry's last win, 3 ms before", []string{ms(time.Second) + "-0-1", ms(3*time.Millisecond) + "-0-1", ms(3*time.Millisecond) + "-0-2"},
			[]string{ms(3*time.Millisecond) + "-0-2"}, 1, []string{ms(3*time.Millisecond) + "-0-2"}, nil},
		{"a hole: missing before a present win", []string{ms(20*time.Millisecond) + "-0-1", ms(3*time.Millisecond) + "-0-1"},
			[]string{ms(20*time.Millisecond) + "-0-1"}, 1, nil, []string{ms(20*time.Millisecond) + "-0-1"}},
		{"a hole: a win of an entry missing before a present one", []string{ms(3*time.Millisecond) + "-0-1", ms(3*time.Millisecond) + "-0-2"},
			[]string{ms(3*time.Millisecond) + "-0-1"}, 1, nil, []string{ms(3*time.Millisecond) + "-0-1"}},
		{"the newest, but 150 ms before the fault", []string{ms(time.Second) + "-0-1", ms(150*time.Millisecond) + "-0-1"},
			[]string{ms(150*time.Millisecond) + "-0-1"}, 1, nil, []string{ms(150*time.Millisecond) + "-0-1"}},
		{"buckets: each queue its own prefix", []string{ms(time.Second) + "-0-1.0", ms(4*time.Millisecond) + "-0-1.0", ms(2*time.Millisecond) + "-0-1.1"},
			[]string{ms(4*time.Millisecond) + "-0-1.0"}, 2, []string{ms(4*time.Millisecond) + "-0-1.0"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{t: t, act: activity{id: "x", buckets: tc.buckets}}
			acked := map[userKey]string{}
			for i, r := range tc.acked {
				acked[userKey{user: strconv.Itoa(i)}] = r
			}
			tail, holes := e.replicationTail(acked, tc.missing, fault)
			slices.Sort(tail)
			slices.Sort(holes)
			if !slices.Equal(tail, tc.tail) || !slices.Equal(holes, tc.holes) {
				t.Errorf("tail %v, holes %v; want %v, %v", tail, holes, tc.tail, tc.holes)
			}
		})
	}
}
