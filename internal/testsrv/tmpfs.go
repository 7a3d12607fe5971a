package testsrv

import (
	"os/exec"
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
