package testsrv

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size (mount's syntax: "2m") on a new temporary folder, unmounted when
// the test ends, and returns the folder: a real file system that fills up. A test that cannot
// mount one (not root, no mount permission) is skipped with the reason.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	})
	return mnt
}

// Fill writes a file in the file system of dir that leaves it leave bytes free, and returns the
// file's path: what a test removes to make room again.
func Fill(t testing.TB, dir string, leave int64) string {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	free := int64(fs.Bavail) * fs.Bsize
	if free <= leave {
		t.Fatalf("%s has %d bytes free, not more than the %d to leave", dir, free, leave)
	}
	p := filepath.Join(dir, "filler")
	if err := os.WriteFile(p, make([]byte, free-leave), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
