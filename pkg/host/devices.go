package host

import (
	"slices"

	"github.com/external-ip/external-ip/pkg/store"
)

// StateDevices are the devices with state in dataDir and the holders
// marked as dataDir's, whose state may have been lost.
func StateDevices(dataDir string) ([]string, error) {
	devs, err := store.Devices(dataDir)
	if err != nil {
		return nil, err
	}
	held, err := Holders(dataDir)
	if err != nil {
		return nil, err
	}
	for _, d := range held {
		if !slices.Contains(devs, d) {
			devs = append(devs, d)
		}
	}
	return devs, nil
}
