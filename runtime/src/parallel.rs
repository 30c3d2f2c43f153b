//! Work spread over the machine's cores.

use std::sync::Mutex;

/// `work(item)` for every item, on as many threads as there are cores (not one per item: with
/// fifty plugins, fifty threads only add stacks, allocator arenas and contention), results in
/// the items' order. `work` must not panic.
pub fn map<T: Send, R: Send>(items: Vec<T>, work: impl Fn(T) -> R + Sync) -> Vec<R> {
    let count = items.len();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(count);
    let queue = Mutex::new(items.into_iter().enumerate());
    let mut results: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let next = queue.lock().expect("no worker panics").next();
                        let Some((index, item)) = next else {
                            return done;
                        };
                        done.push((index, work(item)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("work does not panic"))
            .collect()
    });
    results.sort_by_key(|(index, _)| *index);
    results.into_iter().map(|(_, result)| result).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn keeps_the_order_of_the_items() {
        let squares = super::map((0..100u64).collect(), |n| n * n);
        assert_eq!(squares, (0..100u64).map(|n| n * n).collect::<Vec<_>>());
        assert!(super::map(Vec::<u8>::new(), |n| n).is_empty());
    }
}
