package admission

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestLocalCheckpointKeepsWALShort: while commits keep coming, the writer's checkpoints let the
// WAL start again from its beginning, so the file stays near what one interval writes. Without
// them 3,000 commits (one win each) leave a WAL of more than 12 MB.
func TestLocalCheckpointKeepsWALShort(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenLocalStore(dir, LocalOptions{checkpointEvery: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustDefine(t, s, openAt(time.Now(), "a", 1<<40, 1))
	ctx := context.Background()
	for i := range 3000 {
		d, err := s.Admit(ctx, Request{Activity: "a", User: "u" + strconv.Itoa(i), Qty: 1, RequestID: "r"})
		if err != nil || d.Outcome != Won {
			t.Fatalf("admit %d: %+v %v", i, d, err)
		}
	}
	st := s.Stats()
	if st.Commits < 3000 || st.Checkpoints == 0 || st.CheckpointsFailed != 0 {
		t.Fatalf("stats %+v: want 3,000 commits or more and checkpoints, none failed", st)
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
