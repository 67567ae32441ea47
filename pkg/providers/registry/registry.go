// Package registry lists every provider Exacto knows, by the name used in config.
package registry

import (
	"sort"

	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/calendly"
	"exacto.dev/pkg/providers/generic"
	"exacto.dev/pkg/providers/hubspot"
	"exacto.dev/pkg/providers/instantly"
	"exacto.dev/pkg/providers/meta"
	"exacto.dev/pkg/providers/smartlead"
	"exacto.dev/pkg/providers/standard"
	"exacto.dev/pkg/providers/stripe"
)

var specs = map[string]providers.Spec{}

func init() {
	for _, s := range []providers.Spec{
		stripe.Spec, standard.Spec, meta.Spec, hubspot.Spec, calendly.Spec,
		instantly.Spec, smartlead.Spec, generic.Spec,
	} {
		specs[s.Name] = s
	}
}

// Lookup finds a provider by its config name.
func Lookup(name string) (providers.Spec, bool) {
	s, ok := specs[name]
	return s, ok
}

// Names lists the known providers, sorted.
func Names() []string {
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
