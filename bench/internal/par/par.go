// Package par runs a benchmark's setup and measured loops on a fixed number
// of workers.
package par

import "sync"

// Do runs f for 0..n-1 on the given number of workers and returns the first
// error (every f still runs).
func Do(workers, n int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}
