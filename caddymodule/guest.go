package caddymodule

import (
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// moduleNames lists the registered modules of a guest namespace, for the error about an unknown one.
func moduleNames(namespace string) string {
	var names []string
	for _, info := range caddy.GetModules(namespace) {
		names = append(names, string(info.ID.Name()))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// unmarshalGuest reads "<name> ..." at d: the name of a module of namespace and its own Caddyfile
// syntax (its UnmarshalCaddyfile). unknown formats the error for a name no module registered, from
// the name and the list of registered ones.
func unmarshalGuest(d *caddyfile.Dispenser, namespace, unknown string) (string, caddyfile.Unmarshaler, error) {
	name := d.Val()
	if _, err := caddy.GetModule(namespace + "." + name); err != nil {
		return "", nil, d.Errf(unknown, name, moduleNames(namespace))
	}
	unm, err := caddyfile.UnmarshalModule(d, namespace+"."+name)
	return name, unm, err
}
