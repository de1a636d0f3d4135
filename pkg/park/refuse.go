package park

// RefuseEnv, in a build tagged faultinject, makes Files refuse as a kernel
// without io_uring would, so that tests can drive the fallback to a
// holding child. Declared in every build, for the tests that set it.
const RefuseEnv = "EXTERNAL_IP_PARK_REFUSE"
