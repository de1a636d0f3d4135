package announce

import (
	"log/slog"
	"os"
)

// Holder keeps files whose last close is slow (an AF_PACKET socket, a
// netfilter socket after a destroying commit) open past this process's
// exit, so that the kernel's wait falls after the runtime has seen the
// plugin exit.
type Holder struct {
	// Park has the kernel hold the files (park.Files) and closes them; when
	// it fails they are still ours. Nil parks nothing.
	Park func(files []*os.File) error
	// Start starts a detached child, as SessionOptions.Start; nil starts
	// this binary with Detach.
	Start func(p Plan, files []*os.File) error
	// Log hears at debug that parking failed; nil discards.
	Log *slog.Logger
}

// Hold parks files or, where that fails, gives them to a child for p that
// sends nothing and only holds them. It returns that child's hold pipe
// (nil when parked) for the caller to close once it has closed its own
// copies, so that the child's close is the last. The files are Hold's in
// every case; what names them in the log.
func (h Holder) Hold(p Plan, what string, files []*os.File) (*os.File, error) {
	if len(files) == 0 {
		return nil, nil
	}
	if h.Park != nil {
		err := h.Park(files)
		if err == nil {
			return nil, nil
		}
		if h.Log != nil {
			h.Log.Debug("parking failed, a child holds the "+what, "error", err)
		}
	}
	p.Rounds, p.IPs = 0, nil
	return startPiped(h.Start, p, files)
}

// startPiped starts a child for p that inherits files, after a hold pipe
// when there are any, and returns the pipe's write end for the caller to
// close once it has closed its own copies. A nil start starts this binary.
func startPiped(start func(Plan, []*os.File) error, p Plan, files []*os.File) (*os.File, error) {
	if start == nil {
		start = startSelf
	}
	if len(files) == 0 {
		return nil, start(p, nil)
	}
	r, w, err := os.Pipe()
	if err != nil {
		closeAll(files)
		return nil, err
	}
	p.Hold = true
	if err := start(p, append([]*os.File{r}, files...)); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}
