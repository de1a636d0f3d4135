package config

import "encoding/json"

// setStandby reads `standby`; it runs after setTimeouts: a standby is
// found by the conflict probe, so standby without one could never be.
func (c *Config) setStandby(raw *netConf) error {
	c.Standby = false
	if len(raw.Standby) == 0 || string(raw.Standby) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw.Standby, &c.Standby); err != nil {
		return decodef("standby: want true or false, got %s", truncate(raw.Standby, 64))
	}
	if c.Standby && c.Probe <= 0 {
		return invalidf("standby: true needs a conflictProbe above 0s, which finds the active holder; conflictProbe is %q", c.Probe)
	}
	return nil
}
