// Package hooks sorts the values given as hooks (engine.Config.Hooks,
// entity.HostConfig.Hooks, projection.Config.Hooks) by the hook interfaces
// they implement.
package hooks

// Select returns the values that implement T, in order.
func Select[T any](values []any) []T {
	var out []T
	for _, v := range values {
		if x, ok := v.(T); ok {
			out = append(out, x)
		}
	}
	return out
}
