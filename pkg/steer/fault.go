package steer

// ConntrackFaultEnv, set in a build tagged faultinject, makes deleting
// conntrack entries fail, as when the kernel refuses. Declared in every
// build, for the tests that drive such a build.
const ConntrackFaultEnv = "EXTERNAL_IP_CONNTRACK_FAULT"
