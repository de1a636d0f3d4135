package assigner

// CrashEnv names the step at which a build tagged faultinject kills itself
// with SIGKILL (see atStep), as a crash or an impatient runtime would.
// Declared in every build, for the tests that drive such a build.
const CrashEnv = "EXTERNAL_IP_CRASH_AT"

// ConntrackStallEnv names, in a build tagged faultinject, a FIFO that a
// clean-up opens, and so waits for a writer, after it has read its queue
// and let go of the lock.
const ConntrackStallEnv = "EXTERNAL_IP_CONNTRACK_STALL"
