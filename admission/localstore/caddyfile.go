package localstore

import (
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
)

// UnmarshalCaddyfile sets up the module from the store option of the global seckill block.
// Syntax:
//
//	store memory   # one node, not durable: a restart forgets the sale (tests, demos)
//
// It takes neither arguments nor options.
func (*MemoryModule) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the store's name
	if err := caddyfileargs.NoArg(d); err != nil {
		return err
	}
	if d.NextBlock(d.Nesting()) {
		return d.Err("seckill: store memory takes no options")
	}
	return nil
}

// UnmarshalCaddyfile sets up the module from the store option of the global seckill block.
// Syntax:
//
//	store local <folder> [{   # one node, durable: the sale survives restarts and kill -9
//		fsync always|no       # default no: crash-safe; always: power-loss-safe too
//	}]
func (m *Module) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the store's name
	if !d.AllArgs(&m.Dir) {
		return d.Err("seckill: want store local <folder>, e.g. store local ./seckill-data")
	}
	// Provision checks the folder too (a JSON configuration, a placeholder); here the error
	// points at this line.
	if !strings.Contains(m.Dir, "{") {
		if err := checkFolder(m.Dir); err != nil {
			return d.Errf("seckill: %v", err)
		}
	}
	return caddyfileargs.ParseBlock(d, "seckill", "store local ", func(opt string) (err error) {
		switch opt {
		case "fsync":
			m.Fsync, err = caddyfileargs.OneArg(d)
			if err == nil && m.Fsync != fsyncAlways && m.Fsync != fsyncNo {
				err = d.Errf("seckill: store local fsync %q: want always (flush to the device: survives a "+
					"power loss) or no (the default: survives a crash of the process)", m.Fsync)
			}
		default:
			err = d.Errf("seckill: unrecognized store local option %q", opt)
		}
		return err
	})
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*MemoryModule)(nil)
	_ caddyfile.Unmarshaler = (*Module)(nil)
)
