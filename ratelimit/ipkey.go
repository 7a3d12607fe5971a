package ratelimit

import "net/netip"

// IPKey returns the rate-limit key of a client address: an IPv4 address as is, an IPv4-mapped IPv6
// address as its IPv4 address, and any other IPv6 address as its /64 prefix, because one customer
// (one home, one mobile device) is usually handed a whole /64 and can pick any address in it.
// The zone is ignored. The zero Addr gives "".
func IPKey(addr netip.Addr) string {
	if !addr.IsValid() {
		return ""
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is4() {
		return addr.String()
	}
	return netip.PrefixFrom(addr, 64).Masked().String()
}

// IPKeyString is IPKey of a textual address, false when s is not one. An IPv4 address, the
// common case, is its own key: netip accepts only its canonical dotted form, so s is returned as
// is, without formatting a new string.
func IPKeyString(s string) (string, bool) {
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return "", false
	}
	if addr.Is4() {
		return s, true
	}
	return IPKey(addr), true
}
