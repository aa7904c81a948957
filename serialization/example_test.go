package serialization_test

import (
	"fmt"

	"github.com/annals-go/annals/serialization"
)

func ExampleRegisterJSON() {
	type OrderPlaced struct {
		OrderID string
		Total   int
	}

	r := serialization.NewRegistry()
	if err := serialization.RegisterJSON[OrderPlaced](r, "shop.OrderPlaced"); err != nil {
		fmt.Println(err)
		return
	}

	payload, id, manifest, err := r.Serialize(OrderPlaced{OrderID: "o-1", Total: 42})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d %s %s\n", id, manifest, payload)

	v, err := r.Deserialize(payload, id, manifest)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%+v\n", v.(OrderPlaced))

	_, err = r.Deserialize(payload, id, "shop.Unknown")
	fmt.Println(err)
	// Output:
	// 31 shop.OrderPlaced {"OrderID":"o-1","Total":42}
	// {OrderID:o-1 Total:42}
	// serialization: cannot decode payload (serializer id 31, manifest "shop.Unknown"): serialization: unknown manifest: JSON manifest "shop.Unknown"
}
