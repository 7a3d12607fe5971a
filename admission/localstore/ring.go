package localstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime/debug"
)

// The ring is a fixed file of slots, mapped into memory (MAP_SHARED), that holds the changes the
// writer has not committed yet. A change is copied into its slot before its caller is answered:
// a store into a shared mapping is in the kernel's page cache at once, so a process crash cannot
// lose it, and the caller need not wait for the group commit. SQLite stays the store of record:
// the writer commits the changes in the background, and the next open replays into SQLite the
// changes the ring holds beyond its last commit. docs/admission.md ("The ring") has the design.
//
// A slot is: a CRC-32C of the rest, the payload's length (2 bytes), the change's kind, flags (bit
// 0: the last change of its operation), the epoch (8 bytes: which opening of the store wrote it),
// the change's journal sequence number (8 bytes), then the payload (appendChange). Change number s
// lives in slot s mod localRingSlots.

// localRingName is the ring's file in the store's folder.
const localRingName = "seckill.ring"

const (
	localRingHead    = 4096  // the file's header: magic and geometry
	localRingSlot    = 1024  // bytes per slot: the largest win (localMaxWinBytes) and its header fit
	localRingSlots   = 16384 // 16 MiB: at 40,000 changes a second, 0.4 s of commits can fall behind
	localRingSlotHdr = 24
	localRingPayload = localRingSlot - localRingSlotHdr
	localRingSize    = localRingHead + localRingSlot*localRingSlots
)

// localRingMagic opens the file; the geometry follows it.
const localRingMagic = "seckill ring v1\n"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// localRing is the mapped ring file. put is called under localWriter.mu, in sequence order.
type localRing struct {
	f      *os.File
	mem    []byte
	broken bool // a write faulted (the file's blocks went away): every later change waits for its commit
}

// openLocalRing maps dir's ring, creating it when create is set and the folder has none. A
// missing ring without create is (nil, nil).
func openLocalRing(dir string, create bool) (*localRing, error) {
	path := filepath.Join(dir, localRingName)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if !create {
			return nil, nil
		}
		if err := createLocalRing(dir, path); err != nil {
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
	} else if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	r, err := mapLocalRing(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%s is damaged or not a seckill ring (it is left as it is): %w", path, err)
	}
	return r, nil
}

func mapLocalRing(f *os.File) (*localRing, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() != localRingSize {
		return nil, fmt.Errorf("size %d, want %d", st.Size(), localRingSize)
	}
	if !bytes.Equal(localRingHeader(), readAt(f, localRingHead)) {
		return nil, errors.New("header: not a seckill ring of this geometry")
	}
	mem, err := mapShared(f, localRingSize)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return &localRing{f: f, mem: mem}, nil
}

func readAt(f *os.File, n int) []byte {
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil
	}
	return b
}

// localRingHeader is the file's first page: the magic, then the slot size and count.
func localRingHeader() []byte {
	h := make([]byte, localRingHead)
	copy(h, localRingMagic)
	binary.LittleEndian.PutUint32(h[len(localRingMagic):], localRingSlot)
	binary.LittleEndian.PutUint32(h[len(localRingMagic)+4:], localRingSlots)
	return h
}

// createLocalRing writes the whole file with zeros under a temporary name, syncs it and renames it
// into place: every block is allocated before the mapping writes to it, so a full disk cannot
// fault a write into a hole later.
func createLocalRing(dir, path string) error {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(localRingHeader())
	zeros := make([]byte, 1<<20)
	for left := localRingSize - localRingHead; err == nil && left > 0; left -= len(zeros) {
		_, err = f.Write(zeros[:min(left, len(zeros))])
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = publish(tmp, path, dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

func (r *localRing) slot(seq uint64) []byte {
	off := localRingHead + int(seq%localRingSlots)*localRingSlot
	return r.mem[off : off+localRingSlot : off+localRingSlot]
}

// put writes change seq of epoch into its slot and reports whether it did: a payload too long
// for a slot, or a write that faulted, is not in the ring, and its caller waits for the commit.
func (r *localRing) put(seq, epoch uint64, kind changeKind, last bool, payload []byte) (ok bool) {
	if r.broken || len(payload) > localRingPayload {
		return false
	}
	// A mapped file whose blocks are gone (truncated, or a copy-on-write file system out of space)
	// faults the write; as a panic it is caught here, and the ring is given up instead of the
	// process.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if _, fault := p.(interface{ Addr() uintptr }); !fault {
				panic(p)
			}
			r.broken, ok = true, false
		}
	}()
	s := r.slot(seq)
	n := copy(s[localRingSlotHdr:], payload)
	binary.LittleEndian.PutUint16(s[4:], uint16(n))
	s[6] = byte(kind)
	s[7] = 0
	if last {
		s[7] = 1
	}
	binary.LittleEndian.PutUint64(s[8:], epoch)
	binary.LittleEndian.PutUint64(s[16:], seq)
	binary.LittleEndian.PutUint32(s, crc32.Checksum(s[4:localRingSlotHdr+n], castagnoli))
	return true
}

// changesAfter returns the changes of epoch that follow change number from, in order (numbered
// from+1, from+2, ...): every slot from from+1 on whose checksum, epoch and number match, up to
// the first that does not, without the changes of an operation whose last change is not among
// them (the crash came in the middle of it, before its caller was answered). A slot that matches
// but does not decode is an error.
func (r *localRing) changesAfter(from, epoch uint64) ([]memChange, error) {
	var out []memChange
	complete := 0
	for seq := from + 1; seq <= from+localRingSlots; seq++ {
		s := r.slot(seq)
		n := int(binary.LittleEndian.Uint16(s[4:]))
		if n > localRingPayload ||
			binary.LittleEndian.Uint32(s) != crc32.Checksum(s[4:localRingSlotHdr+n], castagnoli) ||
			binary.LittleEndian.Uint64(s[8:]) != epoch || binary.LittleEndian.Uint64(s[16:]) != seq {
			break
		}
		c, err := decodeChange(changeKind(s[6]), s[localRingSlotHdr:localRingSlotHdr+n])
		if err != nil {
			return nil, fmt.Errorf("change %d: %w", seq, err)
		}
		out = append(out, c)
		if s[7]&1 != 0 {
			complete = len(out)
		}
	}
	return out[:complete], nil
}

// close unmaps the ring and closes its file.
func (r *localRing) close() error {
	return errors.Join(unmapShared(r.mem), r.f.Close())
}
