package sink

// RefuseEnv, in a build tagged faultinject, makes Give refuse as if no
// sink ran and Start start none, so that tests can drive the parked and
// held ways. Declared in every build, for the tests that set it.
const RefuseEnv = "EXTERNAL_IP_SINK_REFUSE"
