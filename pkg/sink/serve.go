package sink

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultIdle is how long a sink lives holding nothing, and how close two
// calls must come for the second to start one.
const DefaultIdle = 10 * time.Second

// Options bound what a sink holds and how long it lives.
type Options struct {
	// Quiet is how long no socket must come before the sink releases
	// what it holds: longer than the destroy work of the last commit
	// (at most 16 ms in the bench's traces, a grace period and the
	// frees). Default 50 ms.
	Quiet time.Duration
	// Idle is how long the sink lives holding nothing. Default
	// DefaultIdle.
	Idle time.Duration
	// Max is the most it holds: past it, the oldest go at once, so that
	// a node that never pauses keeps a bounded number open. Default 4096.
	Max int
	// Log hears at debug what was released; nil discards.
	Log *slog.Logger
}

func (o *Options) defaults() {
	if o.Quiet <= 0 {
		o.Quiet = 50 * time.Millisecond
	}
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	if o.Max <= 0 {
		o.Max = 4096
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// sink is one dataDir's: its socket and what it holds, oldest first.
type sink struct {
	o    Options
	path string
	fd   int
	held []int
	last time.Time // when a socket last came, or the sink started
}

// Serve is the sink of dir, the process Start started, its lock on fd 3
// and its socket on fd 4: it holds what comes until Options.Quiet passes
// with none coming, and returns once it has held nothing for
// Options.Idle.
func Serve(dir string, o Options) error {
	o.defaults()
	if err := unix.Flock(lockFD, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("sink of %s: fd %d is not its lock: %w", dir, lockFD, err)
	}
	if st, err := unix.GetsockoptInt(sockFD, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || st != unix.SOCK_DGRAM {
		return fmt.Errorf("sink of %s: fd %d is not its socket (type %d): %v", dir, sockFD, st, err)
	}
	s := &sink{o: o, path: filepath.Join(dir, sockName), fd: sockFD, last: time.Now()}
	defer s.close()
	for {
		wait := s.until(time.Now())
		if wait < 0 {
			return nil
		}
		if err := s.poll(wait); err != nil {
			return err
		}
	}
}

// until is how long to wait for the next socket: until the quiet release
// while any is held, else until the idle exit; < 0 to exit now.
func (s *sink) until(now time.Time) time.Duration {
	quiet := now.Sub(s.last)
	if len(s.held) > 0 {
		if quiet >= s.o.Quiet {
			s.release(len(s.held), "quiet")
			return 0
		}
		return s.o.Quiet - quiet
	}
	if quiet >= s.o.Idle {
		return -1
	}
	return s.o.Idle - quiet
}

// poll waits at most wait for datagrams, and takes what they carry.
func (s *sink) poll(wait time.Duration) error {
	fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
	ms := int(wait.Milliseconds()) + 1 // never a busy 0 before the deadline
	n, err := unix.Poll(fds, ms)
	if errors.Is(err, unix.EINTR) || n == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sink: poll: %w", err)
	}
	return s.take()
}

// take receives every queued datagram and holds the descriptors they
// carry; a datagram cut short (MSG_CTRUNC) lost the rest to the kernel,
// which closed them.
func (s *sink) take() error {
	oob := make([]byte, unix.CmsgSpace(maxFiles*4))
	for {
		_, oobn, _, _, err := unix.Recvmsg(s.fd, make([]byte, 1), oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EAGAIN) {
			return nil
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("sink: receiving: %w", err)
		}
		s.last = time.Now()
		s.hold(rights(oob[:oobn]))
	}
}

// rights are the descriptors a datagram's control messages carry.
func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

// hold keeps fds, releasing the oldest past Options.Max.
func (s *sink) hold(fds []int) {
	s.held = append(s.held, fds...)
	if over := len(s.held) - s.o.Max; over > 0 {
		s.release(over, "over the limit")
	}
}

// release closes the n oldest held.
func (s *sink) release(n int, why string) {
	start := time.Now()
	for _, fd := range s.held[:n] {
		unix.Close(fd)
	}
	s.held = append(s.held[:0], s.held[n:]...)
	s.o.Log.Debug("sink released sockets", "count", n, "why", why, "took", time.Since(start))
}

// close removes the socket first, so that a late Give finds no sink and
// starts another, then releases what it holds and what is still queued.
// Only a sink started while this one ran (its lock file removed by hand)
// could own the path by then: losing its socket, it idles out.
func (s *sink) close() {
	unix.Unlink(s.path)
	s.take()
	s.release(len(s.held), "exit")
	unix.Close(s.fd)
	os.NewFile(lockFD, lockName).Close()
}
