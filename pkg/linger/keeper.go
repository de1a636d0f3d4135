package linger

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Socket is what a file is, and so why its last close is slow.
type Socket int

const (
	// Packet is an AF_PACKET socket: its release waits for an RCU grace
	// period (synchronize_net).
	Packet Socket = iota + 1
	// Netfilter is a netfilter netlink socket (nf_tables, ctnetlink): its
	// release waits for the nf_tables destroy worker of its network
	// namespace whenever one is pending, whoever's commit queued it (the
	// DEL that ran just before, our own), holding the namespace's commit
	// lock meanwhile (nft_rcv_nl_event).
	Netfilter
)

func (s Socket) String() string {
	switch s {
	case Packet:
		return "packet socket"
	case Netfilter:
		return "netfilter socket"
	}
	return fmt.Sprintf("socket kind %d", int(s))
}

// Options say how a Keeper may keep files; the plugin sets them once.
type Options struct {
	// Sink takes netfilter sockets and keeps them open until calls stop
	// coming (package sink), and closes ours; when it fails the files are
	// still ours. Tried first, for netfilter sockets only. Nil: none.
	Sink func(files []*os.File) error
	// Park has the kernel hold files past the exit and closes ours (see
	// park.Files); when it fails the files are still ours. Nil parks
	// nothing.
	Park func(files []*os.File) error
	// Hold starts a child that holds files, the first of them the read end
	// of its hold pipe, until that pipe's write end is closed, and owns
	// files from then on, started or not.
	Hold func(files []*os.File) error
	// Log hears at debug what was kept and how, and that parking failed;
	// nil discards.
	Log *slog.Logger
}

// Keeper keeps one process's slow-to-close files past its exit. It is
// for a process about to exit (a CNI invocation): Done ends it.
type Keeper struct {
	o       Options
	files   []*os.File // ours, not yet handed over
	kinds   []Socket   // what each of files is, for the log
	signals []*os.File // hold pipes' write ends, closed last
}

// New returns a Keeper that holds nothing yet.
func New(o Options) *Keeper {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Keeper{o: o}
}

// Keep takes f, a copy of a socket that is s, and closes it after the
// process has exited. The caller closes its other copies before Done.
// Every kind is kept: s says why, for the reader and the logs.
func (k *Keeper) Keep(f *os.File, s Socket) {
	if f == nil {
		return
	}
	k.files, k.kinds = append(k.files, f), append(k.kinds, s)
}

// kept logs, at debug, the kinds of the files kept so far and who keeps
// them past the exit.
func (k *Keeper) kept(by string) {
	k.logKept(by, k.kinds)
	k.kinds = nil
}

// logKept logs, at debug, that sockets of those kinds were kept by by.
func (k *Keeper) logKept(by string, kinds []Socket) {
	if !k.o.Log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	names := make([]string, len(kinds))
	for i, s := range kinds {
		names[i] = s.String()
	}
	k.o.Log.Debug("sockets kept past the exit", "sockets", strings.Join(names, ", "), "by", by)
}

// Board gives the files kept so far to a child that the caller starts
// anyway (an announcer of later rounds): start gets a hold pipe's read
// end and copies of the files, and owns them, started or not; with
// nothing kept it gets none. When start fails the files stay kept, for
// the next child or for Done.
func (k *Keeper) Board(start func(files []*os.File) error) error {
	k.toSink()
	if len(k.files) == 0 {
		return start(nil)
	}
	files, err := dupAll(k.files)
	if err != nil {
		return start(nil) // the files stay kept
	}
	w, err := k.hand(start, files)
	if err != nil {
		return err
	}
	closeAll(k.files)
	k.files, k.signals = nil, append(k.signals, w)
	k.kept("the announcer")
	return nil
}

// hand starts a child with a hold pipe before files, and returns the
// pipe's write end.
func (k *Keeper) hand(start func([]*os.File) error, files []*os.File) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		closeAll(files)
		return nil, fmt.Errorf("making a hold pipe: %w", err)
	}
	if err := start(append([]*os.File{r}, files...)); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Done keeps what no child took past the exit, parked or else in a child
// started only to hold it, then tells every child that the process has
// closed its copies. Callers close their own copies first. What could not
// be kept was closed here, and is the error, for a warning.
func (k *Keeper) Done() error {
	k.toSink()
	var err error
	if files := k.files; len(files) > 0 {
		k.files = nil
		err = k.holdPastExit(files)
	}
	closeAll(k.signals) // last: every copy of ours is closed
	k.signals = nil
	return err
}

func (k *Keeper) holdPastExit(files []*os.File) error {
	if k.o.Park != nil {
		err := k.o.Park(files)
		if err == nil {
			k.kept("a parked ring")
			return nil
		}
		k.o.Log.Debug("parking failed, a child holds the sockets", "error", err)
	}
	if k.o.Hold == nil {
		closeAll(files)
		return fmt.Errorf("%d sockets closed in the plugin: nothing to hold them", len(files))
	}
	w, err := k.hand(k.o.Hold, files)
	if err != nil {
		return fmt.Errorf("%d sockets closed in the plugin: %w", len(files), err)
	}
	k.signals = append(k.signals, w)
	k.kept("a holding child")
	return nil
}

// toSink hands the netfilter sockets kept so far to the sink, if there is
// one; what it refuses stays kept, for a child or Done.
func (k *Keeper) toSink() {
	if k.o.Sink == nil {
		return
	}
	var nf, rest []*os.File
	var restKinds []Socket
	for i, f := range k.files {
		if k.kinds[i] == Netfilter {
			nf = append(nf, f)
		} else {
			rest, restKinds = append(rest, f), append(restKinds, k.kinds[i])
		}
	}
	if len(nf) == 0 {
		return
	}
	if err := k.o.Sink(nf); err != nil {
		k.o.Log.Debug("the sink refused the netfilter sockets, kept otherwise", "error", err)
		return
	}
	k.files, k.kinds = rest, restKinds
	k.logKept("the sink", slices.Repeat([]Socket{Netfilter}, len(nf)))
}

// dupAll copies files for a child to inherit, close-on-exec from the
// start so that no other child started meanwhile inherits them.
func dupAll(files []*os.File) ([]*os.File, error) {
	out := make([]*os.File, 0, len(files))
	for _, f := range files {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("copying %s: %w", f.Name(), err)
		}
		out = append(out, os.NewFile(uintptr(fd), f.Name()))
	}
	return out, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// Dup is a close-on-exec copy of c's socket as a file named name, for a
// Keeper: the owner of c keeps using and closing its own copy.
func Dup(c syscall.Conn, name string) (*os.File, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("copying the %s socket: %w", name, derr)
	}
	return os.NewFile(uintptr(fd), name), nil
}
