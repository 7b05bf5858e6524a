package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// sizeFlag is a byte size flag written as a Kubernetes quantity (512Mi,
// 1G, 1048576).
type sizeFlag struct{ v *int64 }

func (f sizeFlag) String() string {
	if f.v == nil {
		return ""
	}
	return resource.NewQuantity(*f.v, resource.BinarySI).String()
}

func (f sizeFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("a size such as 512Mi: %w", err)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return fmt.Errorf("%q is not a positive number of bytes", s)
	}
	*f.v = n
	return nil
}

func (sizeFlag) Type() string { return "size" }
