package assigner

// CrashEnv names the step at which a build tagged faultinject kills itself
// with SIGKILL (see atStep), as a crash or an impatient runtime would.
// Declared in every build, for the tests that drive such a build.
const CrashEnv = "EXTERNAL_IP_CRASH_AT"

// PauseEnv names the step at which a build tagged faultinject stops itself
// with SIGSTOP until a test sends it SIGCONT: two invocations can then be
// made to meet at that step, as a busy node would make them.
const PauseEnv = "EXTERNAL_IP_PAUSE_AT"
