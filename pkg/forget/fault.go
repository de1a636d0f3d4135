package forget

// StallEnv names, in a build tagged faultinject, a FIFO that a clean-up
// opens, and so waits for a writer, after it has read its queue and let
// go of the lock. Declared in every build, for the tests that drive such
// a build.
const StallEnv = "EXTERNAL_IP_CONNTRACK_STALL"
