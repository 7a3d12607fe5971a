package caddymodule

import (
	"testing"

	"github.com/caddy-seckill/caddy-seckill/money"
)

func TestExposedListeners(t *testing.T) {
	for addr, loopback := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:80": true, "[::1]:443": true, "unix//run/caddy.sock": true,
		":8080": false, "0.0.0.0:80": false, "10.0.0.5:443": false, "example.com:443": false,
	} {
		if exposed := len(exposedListeners([]string{addr})) == 1; exposed == loopback {
			t.Errorf("exposedListeners([%q]): exposed %v, want %v", addr, exposed, !loopback)
		}
	}
}

// The embedded backend's orders take the price and title of the configuration loaded last.
func TestOrdersListing(t *testing.T) {
	var o ordersRunner
	if l := o.listing("a"); !l.Price.IsZero() || l.Title != "" {
		t.Fatalf("before any configuration: %+v", l)
	}
	o.setListings(map[string]*ActivityConfig{
		"a": {Price: &money.Price{Amount: 19900, Currency: "USD"}, Title: "Phone"},
		"b": {},
	})
	if l := o.listing("a"); l.Price != (money.Price{Amount: 19900, Currency: "USD"}) || l.Title != "Phone" {
		t.Errorf("a: %+v", l)
	}
	if l := o.listing("b"); !l.Price.IsZero() || l.Title != "" {
		t.Errorf("b without a price: %+v", l)
	}
	o.setListings(map[string]*ActivityConfig{"a": {Price: &money.Price{Amount: 500, Currency: "JPY"}}})
	if l := o.listing("a"); l.Price != (money.Price{Amount: 500, Currency: "JPY"}) || l.Title != "" {
		t.Errorf("a after a reload: %+v", l)
	}
}
