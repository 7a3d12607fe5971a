package localstore

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// TestLocalCheckpointKeepsWALShort: while commits keep coming, the writer's checkpoints let the
// WAL start again from its beginning, so the file stays near what one interval writes. Without
// them 1,500 commits leave a WAL of more than 6 MB.
func TestLocalCheckpointKeepsWALShort(t *testing.T) {
	for _, fsyncAlways := range []bool{false, true} {
		t.Run("fsync="+strconv.FormatBool(fsyncAlways), func(t *testing.T) { testCheckpointKeepsWALShort(t, fsyncAlways) })
	}
}

func testCheckpointKeepsWALShort(t *testing.T, fsyncAlways bool) {
	dir := t.TempDir()
	s, err := Open(dir, Options{FsyncAlways: fsyncAlways, checkpointEvery: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1))
	ctx := context.Background()
	// With fsync always every admission waits for a commit of its own; with the ring the writer
	// commits every localRingCommitEvery, so the admissions go on until as many commits came.
	deadline := time.Now().Add(2 * time.Minute) // a guard against a hang: a loaded machine commits slowly
	for i := 0; i < 1500 || s.Stats().Commits < 1500; i++ {
		d, err := s.Admit(ctx, admission.Request{Activity: "a", User: "u" + strconv.Itoa(i), Qty: 1, RequestID: "r"})
		if err != nil || d.Outcome != admission.Won {
			t.Fatalf("admit %d: %+v %v", i, d, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d commits after 2 minutes", s.Stats().Commits)
		}
	}
	st := s.Stats()
	if st.Commits < 1500 || st.Checkpoints == 0 || st.CheckpointsFailed != 0 {
		t.Fatalf("stats %+v: want 1,500 commits or more and checkpoints, none failed", st)
	}
	fi, err := os.Stat(filepath.Join(dir, localDBName+"-wal"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 4<<20 {
		t.Fatalf("WAL of %d bytes after %d commits and %d checkpoints: it never started again", fi.Size(), st.Commits, st.Checkpoints)
	}
	if _, err := os.Stat(filepath.Join(dir, localDBName+"-shm")); !os.IsNotExist(err) {
		t.Fatalf("a -shm file beside the database (%v): the WAL index should be in the writer's memory (exclusive locking)", err)
	}
	t.Logf("%d commits, %d checkpoints (%s each), WAL %d bytes", st.Commits, st.Checkpoints, st.CheckpointTime/time.Duration(st.Checkpoints), fi.Size())
}
