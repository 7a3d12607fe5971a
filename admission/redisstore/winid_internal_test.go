package redisstore

import "testing"

// TestSplitWinID: a win id is cut into its entry id and its win number in canonical decimal; an
// entry id and anything malformed are not win ids (Ack leaves them alone, DeadLetter answers not
// found).
func TestSplitWinID(t *testing.T) {
	for _, tc := range []struct{ id, entry, k string }{
		{"1700000000000-0-1", "1700000000000-0", "1"},
		{"5-12-007", "5-12", "7"},
		{"5-12-0", "5-12", "0"},
		{"1700000000000-0", "", ""},
		{"5-12-3-4", "", ""},
		{"5-12-", "", ""},
		{"-12-3", "", ""},
		{"5--3", "", ""},
		{"5-x-3", "", ""},
		{"5-12-+3", "", ""},
		{"5-12-4294967296", "", ""},
		{"", "", ""},
	} {
		e, k, ok := splitWinID(tc.id)
		if ok != (tc.entry != "") || e != tc.entry || k != tc.k {
			t.Errorf("splitWinID(%q) = %q, %q, %v; want %q, %q", tc.id, e, k, ok, tc.entry, tc.k)
		}
	}
}
