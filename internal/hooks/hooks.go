// Package hooks sorts the values given as hooks (engine.Config.Hooks,
// entity.HostConfig.Hooks, projection.Config.Hooks) by the hook interfaces
// they implement.
package hooks

import "fmt"

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

// Refuse returns an error naming the first value of values that
// implements no hook interface (is reports whether one does), or nil. A
// value given as a hook that is no hook is a mistake, which franz-go's
// kgo refuses too. field names the configuration field in the error.
func Refuse(field string, values []any, is func(any) bool) error {
	for i, v := range values {
		if !is(v) {
			return fmt.Errorf("%s[%d] (%T) implements no hook interface of its package", field, i, v)
		}
	}
	return nil
}
