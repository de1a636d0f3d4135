package announce

import "os"

// HoldPastExit starts this binary as a child that holds files, the first
// of them the read end of its hold pipe, until that pipe's write end
// closes, and sends nothing (linger.Options.Hold, for a binary whose main
// runs a Runner for EnvPlan). It owns files, started or not.
func HoldPastExit(files []*os.File) error { return startSelf(Plan{Hold: true}, files) }
