package steer

import (
	"errors"
	"log/slog"

	"github.com/external-ip/external-ip/pkg/nat"
)

// Mend makes the table say what w wants, from d, Compare's result for w
// (the consumer that applies it: GC, repair, and a change that made the
// table anew): the fixed part made again if broken, missing rules back,
// rules of gone attachments away, the hairpin and exclusion sets as the
// comparison keeps them. forget takes the flows a stray ingress rule DNATed, once
// the table no longer steers to them.
func Mend(t NAT, d Diff, w Want, log *slog.Logger, forget func([]Gone)) error {
	if d.Broken != "" && !w.Empty() {
		if err := t.Ensure(); err != nil {
			return err
		}
	}
	var errs []error
	for _, x := range d.Ingress {
		errs = append(errs, t.SetIngress(x.IP, x.Want))
	}
	for _, x := range d.StrayIngress {
		log.Info("stray ingress rule removed", "ip", x.IP)
		if err := t.SetIngress(x.IP, nil); err != nil {
			errs = append(errs, err) // still steered: the next GC forgets
			continue
		}
		forget(StrayFlows(x.IP, x.Got, w.Held[x.IP]))
	}
	for _, x := range d.Egress {
		errs = append(errs, t.SetEgress(x.Key, x.Want))
	}
	for _, x := range d.StrayEgress {
		log.Info("stray egress rule removed", "source", x.Key.Source, "uplink", x.Key.Uplink, "ip", x.Got)
		errs = append(errs, t.DelEgress(x.Key))
	}
	return errors.Join(append(errs, mendHairpins(t, d.Hairpin, log), mendExclusions(t, d.Exclusion, log))...)
}

// mendExclusions makes the exclusion sets serve the elements the
// comparison keeps, in one change, as mendHairpins does.
func mendExclusions(t NAT, ch nat.Change, log *slog.Logger) error {
	for _, p := range ch.DelExclude {
		log.Info("egress exclusion element no record needs removed", "subnet", p.Src, "destination", p.Dst)
	}
	if len(ch.Exclude)+len(ch.DelExclude) == 0 {
		return nil
	}
	return t.Apply(ch)
}

// mendHairpins makes the hairpin sets hold the subnets the comparison
// keeps, in one change: a subnet replaced by a narrower one never leaves
// a gap.
func mendHairpins(t NAT, ch nat.Change, log *slog.Logger) error {
	for _, p := range ch.DelHairpin {
		log.Info("hairpin subnet no record needs removed", "subnet", p)
	}
	if len(ch.Hairpin)+len(ch.DelHairpin) == 0 {
		return nil
	}
	return t.Apply(ch)
}
