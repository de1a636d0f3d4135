package standby

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/store"
)

// recorded is path's Netns as the plugin's ADD records it.
func recorded(t *testing.T, path string) store.Netns {
	var st, dir unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Dir(path), &dir); err != nil {
		t.Fatal(err)
	}
	return store.Netns{Path: path, Dev: st.Dev, Ino: st.Ino, DirDev: dir.Dev, DirIno: dir.Ino}
}

// A takeover whose move is done is done, though its first announcement
// could not go out (here: no such uplink): the watch must count the IP
// active, not try the takeover again every period.
func TestATakeoverIsDoneWhenItsFirstAnnouncementFails(t *testing.T) {
	s := &StateMoves{DataDir: t.TempDir()}
	h := Held{IP: netip.MustParseAddr("192.0.2.10"), Uplink: "eip-no-such", Device: "eip0"}
	if _, err := announce.LookUplink(h.Uplink); err == nil {
		t.Fatalf("uplink %s exists here", h.Uplink)
	}
	if err := s.TakeOver(h); err != nil {
		t.Errorf("takeover: %v; want it done, its announcement's failure logged", err)
	}
}

// A read whose stamps are as old as the last read's are trusted; a stamp
// within a clock tick of that read may hide a change made just after it.
func TestTheStateIsReadAgainWhenAStampIsTooCloseToTheLastRead(t *testing.T) {
	read := time.Now()
	old := map[string]time.Time{"att": read.Add(-time.Second)}
	s := &StateMoves{seen: old, readAt: read}
	if !s.unchanged(map[string]time.Time{"att": read.Add(-time.Second)}) {
		t.Errorf("stamps as the last read saw them, a second old: read again")
	}
	if s.unchanged(map[string]time.Time{"att": read}) {
		t.Errorf("a stamp that changed: not read again")
	}
	s.seen = map[string]time.Time{"att": read.Add(-time.Millisecond)}
	if s.unchanged(map[string]time.Time{"att": read.Add(-time.Millisecond)}) {
		t.Errorf("a stamp a millisecond before the last read: trusted, though a change in the same tick leaves it as it was")
	}
	if (&StateMoves{}).unchanged(map[string]time.Time{}) {
		t.Errorf("never read: trusted")
	}
}

func TestANamespaceIsGoneOnlyWhereItsDirectoryIsTheOneTheADDSaw(t *testing.T) {
	own := recorded(t, "/proc/thread-self/ns/net")
	if NetnsGone(own) {
		t.Fatalf("this thread's own namespace %+v reads as gone", own)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "pod")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ns := recorded(t, path)
	if NetnsGone(ns) {
		t.Errorf("a file still there reads as gone")
	}
	other := ns
	other.Ino++
	if NetnsGone(other) {
		t.Errorf("a file there that is no namespace (a bind mount this process does not see) reads as gone")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if !NetnsGone(ns) {
		t.Errorf("a path no more there reads as alive")
	}
	elsewhere := ns
	elsewhere.DirIno++
	if NetnsGone(elsewhere) {
		t.Errorf("a path gone from a directory other than the one the ADD saw reads as gone")
	}
	if NetnsGone(store.Netns{}) {
		t.Errorf("a record naming no namespace reads as gone")
	}
	m := &StateMoves{}
	if m.Gone(Held{Containers: []store.Netns{ns, own}}) || !m.Gone(Held{Containers: []store.Netns{ns}}) || m.Gone(Held{}) {
		t.Errorf("Gone: want true only when every container is gone, and never for none")
	}
}
