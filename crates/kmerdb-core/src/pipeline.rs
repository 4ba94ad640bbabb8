//! Stages joined by bounded queues: the shape of a run over batches (read → look up → finish →
//! write).
//!
//! Each stage is a thread of its own that takes items in order and passes them on in order, so
//! nothing needs reassembling; the queue between two stages holds `depth` items, which is how far
//! a stage may run ahead of the next. Unlike rounds in lockstep (each batch waits for the slowest
//! stage of its round), a stage that is briefly slow only drains its queue: the run takes as long
//! as its busiest stage, not the sum of each round's slowest.
//!
//! Ending: the first stage ends the run by producing nothing more; each later stage ends when its
//! input does. A stage that fails returns its error: the stages after it see their input end, the
//! stages before it find their output closed and stop. [`Pipeline::finish`] returns the first
//! error in stage order, which is the cause (a later stage only ever ends because of it).
//!
//! Each stage's time is measured: working, waiting for input (starved) and waiting for room in the
//! next queue (blocked), so that `-v` shows which stage the run waited for.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

/// Where one stage's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTime {
    /// Working on items.
    pub busy: Duration,
    /// Waiting for the stage before it.
    pub starved: Duration,
    /// Waiting for room in the queue to the stage after it.
    pub blocked: Duration,
    /// Items it passed on (or consumed, for the last stage).
    pub items: u64,
}

/// The stages started so far, in order, on threads of `scope`.
pub struct Pipeline<'scope, E> {
    stages: Vec<(&'static str, ScopedJoinHandle<'scope, Result<StageTime, E>>)>,
}

/// The end of the last queue, where the next stage takes its input.
pub struct Queue<T>(Receiver<T>);

impl<T> Queue<T> {
    /// Runs `consume` on every item on the calling thread, as the last stage.
    pub fn sink<E>(self, mut consume: impl FnMut(T) -> Result<(), E>) -> Result<StageTime, E> {
        let mut time = StageTime::default();
        loop {
            let Some(item) = take(&self.0, &mut time) else { return Ok(time) };
            let t = Instant::now();
            consume(item)?;
            time.busy += t.elapsed();
            time.items += 1;
        }
    }
}

impl<'scope, E: Send + 'scope> Pipeline<'scope, E> {
    /// Starts the first stage, `name`: `produce` is called until it gives `None` (the end) or an
    /// error.
    pub fn source<'env, O: Send + 'scope>(
        scope: &'scope Scope<'scope, 'env>,
        name: &'static str,
        depth: usize,
        mut produce: impl FnMut() -> Result<Option<O>, E> + Send + 'scope,
    ) -> (Self, Queue<O>) {
        let (tx, rx) = sync_channel(depth);
        let handle = scope.spawn(move || produce_into(&tx, &mut produce));
        (Pipeline { stages: vec![(name, handle)] }, Queue(rx))
    }

    /// Starts the next stage, `name`: `work` on every item of `input`, in order.
    pub fn stage<'env, I: Send + 'scope, O: Send + 'scope>(
        &mut self,
        scope: &'scope Scope<'scope, 'env>,
        name: &'static str,
        depth: usize,
        input: Queue<I>,
        mut work: impl FnMut(I) -> Result<O, E> + Send + 'scope,
    ) -> Queue<O> {
        let (tx, rx) = sync_channel(depth);
        let handle = scope.spawn(move || {
            let mut time = StageTime::default();
            loop {
                let Some(item) = take(&input.0, &mut time) else { return Ok(time) };
                let t = Instant::now();
                let out = work(item)?;
                time.busy += t.elapsed();
                if !pass_on(&tx, out, &mut time) {
                    return Ok(time);
                }
            }
        });
        self.stages.push((name, handle));
        Queue(rx)
    }

    /// Starts the next stage, `name`, on `workers` threads that take its items in turn: item `i`
    /// goes to worker `i % workers`, which `work` is told, and the results are passed on in the
    /// items' order. For work that mostly waits on a device of its own (a GPU stream a worker):
    /// each worker's next item starts while the others' are still under way, where a stage
    /// that split every item over the workers and joined them held each item to its slowest part.
    /// Its time is the workers' busy time summed, the waits of its taking and passing on.
    pub fn stage_in_turn<'env, I: Send + 'scope, O: Send + 'scope>(
        &mut self,
        scope: &'scope Scope<'scope, 'env>,
        name: &'static str,
        depth: usize,
        input: Queue<I>,
        workers: usize,
        work: impl Fn(usize, I) -> Result<O, E> + Send + Sync + 'scope,
    ) -> Queue<O> {
        if workers <= 1 {
            return self.stage(scope, name, depth, input, move |item| work(0, item));
        }
        let (tx, rx) = sync_channel(depth);
        let handle = scope.spawn(move || {
            let work = &work;
            std::thread::scope(|inner| {
                let (mut to_workers, mut from_workers, mut running) = (Vec::new(), Vec::new(), Vec::new());
                for w in 0..workers {
                    let (in_tx, in_rx) = sync_channel::<(usize, I)>(depth);
                    let (out_tx, out_rx) = sync_channel::<O>(depth);
                    running.push(inner.spawn(move || -> Result<Duration, (usize, E)> {
                        let mut busy = Duration::ZERO;
                        for (i, item) in in_rx {
                            let t = Instant::now();
                            let out = work(w, item).map_err(|e| (i, e))?;
                            busy += t.elapsed();
                            // The collector has gone: the run is ending.
                            if out_tx.send(out).is_err() {
                                break;
                            }
                        }
                        Ok(busy)
                    }));
                    to_workers.push(in_tx);
                    from_workers.push(out_rx);
                }
                // Results in the items' order: worker i % workers holds item i's. A worker that
                // failed closes its queue, which ends the collecting (and so the next stages).
                let collector = inner.spawn(move || {
                    let mut time = StageTime::default();
                    for w in (0..workers).cycle() {
                        let Ok(out) = from_workers[w].recv() else { break };
                        if !pass_on(&tx, out, &mut time) {
                            break;
                        }
                    }
                    time
                });
                let mut time = StageTime::default();
                for (i, w) in (0..workers).cycle().enumerate() {
                    let Some(item) = take(&input.0, &mut time) else { break };
                    // A worker that failed has dropped its queue: stop taking items.
                    if to_workers[w].send((i, item)).is_err() {
                        break;
                    }
                }
                drop(to_workers);
                let collected = collector.join().expect("a pipeline stage does not panic");
                time.blocked = collected.blocked;
                time.items = collected.items;
                // Of several workers' errors, the earliest item's: the later ones may be its effects.
                let mut failed: Option<(usize, E)> = None;
                for worker in running {
                    match worker.join().expect("a pipeline stage does not panic") {
                        Ok(busy) => time.busy += busy,
                        Err((i, e)) => {
                            if failed.as_ref().is_none_or(|(first, _)| i < *first) {
                                failed = Some((i, e));
                            }
                        }
                    }
                }
                failed.map_or(Ok(time), |(_, e)| Err(e))
            })
        });
        self.stages.push((name, handle));
        Queue(rx)
    }

    /// Waits for every stage; `last` is the last stage's result (its name given here). Returns
    /// each stage's name and time in order, or the first error in stage order.
    pub fn finish(self, last: (&'static str, Result<StageTime, E>)) -> Result<Vec<(&'static str, StageTime)>, E> {
        let joined = self.joined();
        in_stage_order(joined.chain(std::iter::once(last)))
    }

    /// Each stage's name and result, waiting for them in order.
    fn joined(self) -> impl Iterator<Item = (&'static str, Result<StageTime, E>)> {
        self.stages.into_iter().map(|(name, h)| (name, h.join().expect("a pipeline stage does not panic")))
    }

    /// Starts a pipeline whose first stage runs on the calling thread, through the returned
    /// [`Feed`]: for a caller that is one of a thread pool's threads and whose first stage runs on
    /// that pool (a stage thread that waited for the pool would wait for the caller, which waits
    /// for the stages). The later stages and the last ([`Pipeline::sink_on_thread`]) have threads
    /// of their own; [`Pipeline::finish_fed`] ends the run.
    pub fn fed<T: Send + 'scope>(depth: usize) -> (Self, Feed<T>, Queue<T>) {
        let (tx, rx) = sync_channel(depth);
        (Pipeline { stages: Vec::new() }, Feed(tx), Queue(rx))
    }

    /// Starts the last stage, `name`, on a thread of its own: `consume` on every item of `input`.
    pub fn sink_on_thread<'env, I: Send + 'scope>(
        &mut self,
        scope: &'scope Scope<'scope, 'env>,
        name: &'static str,
        input: Queue<I>,
        consume: impl FnMut(I) -> Result<(), E> + Send + 'scope,
    ) {
        self.stages.push((name, scope.spawn(move || input.sink(consume))));
    }

    /// Waits for every stage of a [`Pipeline::fed`] run; `first` is the calling thread's stage
    /// (what [`Feed::run`] returned). Returns each stage's name and time in order, or the first
    /// error in stage order.
    pub fn finish_fed(self, first: (&'static str, Result<StageTime, E>)) -> Result<Vec<(&'static str, StageTime)>, E> {
        in_stage_order(std::iter::once(first).chain(self.joined()))
    }
}

/// The input of a [`Pipeline::fed`] run's second stage, fed by the calling thread.
pub struct Feed<T>(SyncSender<T>);

impl<T> Feed<T> {
    /// Runs the first stage on the calling thread: `produce` until it gives `None` or an error,
    /// each item passed on; ends early, without error, when the next stage has gone.
    pub fn run<E>(self, produce: &mut dyn FnMut() -> Result<Option<T>, E>) -> Result<StageTime, E> {
        produce_into(&self.0, produce)
    }
}

/// Runs a two-stage pipeline whose first stage, `produce`, runs on the calling thread and whose
/// last, `consume`, on a thread of its own, joined by a queue of `depth` items. For a caller that
/// is one of a thread pool's threads and whose first stage runs on that pool: a stage thread
/// that waited for the pool would wait for the caller, which waits for the stages.
pub fn run_here<T: Send, E: Send>(
    first: (&'static str, &mut dyn FnMut() -> Result<Option<T>, E>),
    depth: usize,
    last: (&'static str, &mut (dyn FnMut(T) -> Result<(), E> + Send)),
) -> Result<Vec<(&'static str, StageTime)>, E> {
    fed_here(first.0, |feed| feed.run(first.1), depth, last)
}

/// A two-stage pipeline whose first stage, `name`, is `run` on the calling thread, feeding the
/// last on a thread of its own (what [`run_here`] and [`run_here_streaming`] share).
fn fed_here<T: Send, E: Send>(
    name: &'static str,
    run: impl FnOnce(Feed<T>) -> Result<StageTime, E>,
    depth: usize,
    last: (&'static str, &mut (dyn FnMut(T) -> Result<(), E> + Send)),
) -> Result<Vec<(&'static str, StageTime)>, E> {
    std::thread::scope(|scope| {
        let (mut p, feed, queue) = Pipeline::fed(depth);
        p.sink_on_thread(scope, last.0, queue, last.1);
        // The queue to the last stage closes as the first ends (`run` takes `feed`).
        let fed = run(feed);
        p.finish_fed((name, fed))
    })
}

/// A first stage that works on `items` on `pool`, as many at once as the pool has threads, and
/// gives the results in the items' order (a window of items at a time, each waiting for the
/// slowest of its window: for items of about equal work that are all there from the start, as
/// the CPU build's shards are).
///
/// The work runs on `pool` through `install`, never by blocking a pool thread on a channel: the
/// caller may be the pool's only thread.
pub fn in_order_windows<'a, I: Send + 'a, O: Send + 'a, E: Send + 'a>(
    pool: &'a rayon::ThreadPool,
    items: Vec<I>,
    work: impl Fn(I) -> Result<O, E> + Sync + Send + 'a,
) -> impl FnMut() -> Result<Option<O>, E> + Send + 'a {
    use rayon::prelude::*;
    let width = pool.current_num_threads().max(1);
    let mut items = items.into_iter();
    let mut ready = std::collections::VecDeque::with_capacity(width);
    move || {
        if ready.is_empty() {
            let window: Vec<I> = items.by_ref().take(width).collect();
            let done: Vec<Result<O, E>> = pool.install(|| window.into_par_iter().map(&work).collect());
            ready.extend(done);
        }
        ready.pop_front().transpose()
    }
}

/// Thread pools that work on items side by side, one item at a time each, so that an item's own
/// parallel work (rayon's joins inside it) runs on its lane's threads only.
///
/// Why not one pool: a pool thread that waits inside one item's join works on whatever else the
/// pool holds meanwhile, a whole other item included, and its own item then waits for that one
/// to end. A GPU build's shards of 0.4-1.2 s took 2.9-3.1 s that way, and the writer, which takes
/// them in order, sat idle behind them (`bench/results/HISTORY.md`, "The GPU passes' finishing").
pub struct Lanes {
    pools: Vec<rayon::ThreadPool>,
}

impl Lanes {
    /// `threads` threads (at least one) in lanes of `per_lane` threads or one fewer, named
    /// `name-LANE-THREAD`.
    pub fn new(threads: usize, per_lane: usize, name: &'static str) -> Result<Self, rayon::ThreadPoolBuildError> {
        let threads = threads.max(1);
        let lanes = threads.div_ceil(per_lane.max(1));
        let pools = (0..lanes)
            .map(|lane| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads / lanes + usize::from(lane < threads % lanes))
                    .thread_name(move |i| format!("{name}-{lane}-{i}"))
                    .build()
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { pools })
    }

    /// The lanes' threads, all together.
    pub(crate) fn threads(&self) -> usize {
        self.pools.iter().map(|p| p.current_num_threads()).sum()
    }
}

/// Items as they arrive: the next one, waiting for it when asked to (`None` then means there are
/// no more), else `None` when it has not arrived yet.
pub(crate) type Arrivals<'a, I> = dyn FnMut(bool) -> Option<I> + Send + 'a;

/// An item's result from its lane, or the panic that ended its work.
type LaneResult<O, E> = (u64, std::thread::Result<Result<O, E>>);

/// [`run_here`] whose first stage runs `work` on each item as it arrives, an item a lane of
/// `lanes` at a time, holding up to the lanes' thread count of items, and passes the results on in
/// the items' order: a slow item holds back only the passing on of the items after it, not their
/// start (as a window of [`in_order_windows`] would).
///
/// The stage waits for an item only when it holds none: everything it took has been passed on.
/// So a producer that waits for a resource the items hold (a GPU waiting for a buffer given
/// back once its shard is finished) cannot wait on this stage. The lanes' threads are not the
/// caller's, so the caller may be the only thread of the pool it runs on.
pub fn run_here_streaming<I: Send, O: Send, E: Send>(
    lanes: &Lanes,
    (name, next): (&'static str, &mut Arrivals<'_, I>),
    work: &(dyn Fn(I) -> Result<O, E> + Sync),
    depth: usize,
    last: (&'static str, &mut (dyn FnMut(O) -> Result<(), E> + Send)),
) -> Result<Vec<(&'static str, StageTime)>, E> {
    let (to_lanes, items) = std::sync::mpsc::channel::<(u64, I)>();
    let items = std::sync::Mutex::new(items);
    let (done_tx, done) = std::sync::mpsc::channel::<LaneResult<O, E>>();
    let run = |feed: Feed<O>| {
        std::thread::scope(|scope| {
            for (lane, pool) in lanes.pools.iter().enumerate() {
                let (items, done_tx) = (&items, done_tx.clone());
                let lane_loop = move || loop {
                    // One idle lane waits for the next item at a time; the others wait for it.
                    let next = items.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).recv();
                    let Ok((seq, item)) = next else { return };
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pool.install(|| work(item))));
                    if done_tx.send((seq, result)).is_err() {
                        return;
                    }
                };
                std::thread::Builder::new()
                    .name(format!("{name}-lane-{lane}"))
                    .spawn_scoped(scope, lane_loop)
                    .expect("a thread for a lane");
            }
            drop(done_tx);
            // The lanes end when `to_lanes` drops, as this returns or unwinds.
            stream_in_order(lanes.threads() as u64, next, to_lanes, &done, &feed.0)
        })
    };
    fed_here(name, run, depth, last)
}

/// The first stage of [`run_here_streaming`]: each item sent to the lanes on `to_lanes`, at most
/// `width` held, their results (from `done`) sent on `tx` in the items' order.
fn stream_in_order<I, O, E>(
    width: u64,
    next: &mut Arrivals<'_, I>,
    to_lanes: std::sync::mpsc::Sender<(u64, I)>,
    done: &Receiver<LaneResult<O, E>>,
    tx: &SyncSender<O>,
) -> Result<StageTime, E> {
    let mut ready = std::collections::BTreeMap::<u64, std::thread::Result<Result<O, E>>>::new();
    let (mut started, mut passed, mut ended) = (0u64, 0u64, false);
    let mut time = StageTime::default();
    let begun = Instant::now();
    let start = |item: I, started: &mut u64| {
        to_lanes.send((*started, item)).expect("the lanes take items until this stage ends");
        *started += 1;
    };
    'stage: loop {
        // Results in order, as far as the next stage has room: waiting for room here would
        // leave the items that arrive meanwhile unstarted.
        let mut full = false;
        while let Some(entry) = ready.first_entry().filter(|e| *e.key() == passed) {
            let result = entry.remove().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            match tx.try_send(result?) {
                Ok(()) => (passed, time.items) = (passed + 1, time.items + 1),
                Err(TrySendError::Full(out)) => {
                    ready.insert(passed, Ok(Ok(out)));
                    full = true;
                    break;
                }
                Err(TrySendError::Disconnected(_)) => break 'stage, // the next stage has gone
            }
        }
        if started == passed {
            if ended {
                break;
            }
            // Holding nothing: the one place the stage waits for an item.
            let t = Instant::now();
            match next(true) {
                Some(item) => start(item, &mut started),
                None => ended = true,
            }
            time.starved += t.elapsed();
            continue;
        }
        while started - passed < width {
            let Some(item) = next(false) else { break };
            start(item, &mut started);
        }
        // A result, or a moment for more items to arrive or room to open.
        let t = Instant::now();
        let waited = done.recv_timeout(Duration::from_millis(1)).ok();
        if full {
            time.blocked += t.elapsed();
        }
        if let Some((seq, result)) = waited {
            ready.insert(seq, result);
            ready.extend(done.try_iter());
        }
    }
    time.busy = begun.elapsed().saturating_sub(time.starved + time.blocked);
    Ok(time)
}

/// The stages' times in order, or the first error in stage order (the cause: a later stage only
/// ever ends because of it).
fn in_stage_order<E>(
    results: impl Iterator<Item = (&'static str, Result<StageTime, E>)>,
) -> Result<Vec<(&'static str, StageTime)>, E> {
    let mut times = Vec::new();
    let mut error = None;
    for (name, result) in results {
        match result {
            Ok(time) => times.push((name, time)),
            Err(e) => {
                // The error names its file and record; `-v` also says which stage met it.
                log::debug!("the {name} stage ended the run{}", if error.is_some() { " too" } else { "" });
                error = error.or(Some(e));
            }
        }
    }
    error.map_or(Ok(times), Err)
}

/// A first stage's loop: `produce` until it gives `None` or an error, each item sent on `tx`; ends
/// early, without error, when the next stage has gone.
fn produce_into<T, E>(tx: &SyncSender<T>, produce: &mut dyn FnMut() -> Result<Option<T>, E>) -> Result<StageTime, E> {
    let mut time = StageTime::default();
    loop {
        let t = Instant::now();
        let Some(item) = produce()? else { return Ok(time) };
        time.busy += t.elapsed();
        if !pass_on(tx, item, &mut time) {
            return Ok(time);
        }
    }
}

/// The next item of `rx`, the wait counted as starved; `None` when the stage before has ended.
fn take<T>(rx: &Receiver<T>, time: &mut StageTime) -> Option<T> {
    let t = Instant::now();
    let item = rx.recv().ok();
    time.starved += t.elapsed();
    item
}

/// Sends `item` on; false if the next stage has gone (it failed, or the run is ending).
fn pass_on<T>(tx: &SyncSender<T>, item: T, time: &mut StageTime) -> bool {
    let t = Instant::now();
    let sent = tx.send(item).is_ok();
    time.blocked += t.elapsed();
    time.items += sent as u64;
    sent
}

/// The stages' times as one line:
/// `reading 2.61 s (waiting 0.00 s for input, 0.40 s for room), packing …`.
pub fn describe(times: &[(&'static str, StageTime)]) -> String {
    let parts: Vec<String> = times
        .iter()
        .map(|(name, t)| {
            format!(
                "{name} {:.2} s (waiting {:.2} s for input, {:.2} s for room)",
                t.busy.as_secs_f64(),
                t.starved.as_secs_f64(),
                t.blocked.as_secs_f64()
            )
        })
        .collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three stages and a sink see every item once, in order.
    #[test]
    fn items_pass_every_stage_in_order() {
        let mut seen = Vec::new();
        let times = std::thread::scope(|scope| {
            let mut next = 0u32;
            let (mut p, q) = Pipeline::<()>::source(scope, "count", 1, move || {
                next += 1;
                Ok((next <= 1000).then_some(next))
            });
            let q = p.stage(scope, "double", 2, q, |x| Ok(x * 2));
            let q = p.stage(scope, "slowly", 1, q, |x| {
                if x % 100 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(x + 1)
            });
            let last = q.sink(|x| {
                seen.push(x);
                Ok(())
            });
            p.finish(("collect", last))
        })
        .unwrap();
        assert_eq!(seen, (1..=1000).map(|x| x * 2 + 1).collect::<Vec<_>>());
        let names: Vec<_> = times.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["count", "double", "slowly", "collect"]);
        assert!(times.iter().all(|(_, t)| t.items == 1000), "{times:?}");
    }

    /// A failing middle stage: its error is the run's, the first stage stops although it could
    /// go on for ever, and the sink sees only what came before the failure.
    #[test]
    fn a_failing_stage_stops_the_run_and_its_error_is_returned() {
        let mut seen = Vec::new();
        let result = std::thread::scope(|scope| {
            let mut next = 0u64;
            let (mut p, q) = Pipeline::source(scope, "endless", 1, move || {
                next += 1;
                Ok(Some(next))
            });
            let q = p.stage(scope, "check", 1, q, |x| if x == 50 { Err(format!("item {x} is bad")) } else { Ok(x) });
            let last = q.sink(|x| {
                seen.push(x);
                Ok(())
            });
            p.finish(("collect", last))
        });
        assert_eq!(result.unwrap_err(), "item 50 is bad");
        assert_eq!(seen, (1..50).collect::<Vec<_>>());
    }

    /// Items taken in turn by several workers, each slow at its own times: every item once, in
    /// order, item i on worker i % workers; one worker busy does not stop the others.
    #[test]
    fn a_stage_in_turn_keeps_order_and_gives_item_i_to_worker_i_mod_n() {
        for workers in [1, 2, 3] {
            let mut seen = Vec::new();
            let times = std::thread::scope(|scope| {
                let mut next = 0usize;
                let (mut p, q) = Pipeline::<()>::source(scope, "count", 1, move || {
                    next += 1;
                    Ok((next <= 300).then_some(next - 1))
                });
                let q = p.stage_in_turn(scope, "workers", 1, q, workers, |w, i| {
                    // Unequal work, so that results come back out of order if nothing reorders.
                    if (i * 7) % 5 == 0 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Ok((i, w))
                });
                let last = q.sink(|x| {
                    seen.push(x);
                    Ok(())
                });
                p.finish(("collect", last))
            })
            .unwrap();
            assert_eq!(seen, (0..300).map(|i| (i, i % workers)).collect::<Vec<_>>(), "{workers} workers");
            assert!(times.iter().all(|(_, t)| t.items == 300), "{times:?}");
        }
    }

    /// A worker's failure is the run's error (the earliest item's when two fail), the source stops
    /// although it could go on for ever, and nothing after the failed item is passed on.
    #[test]
    fn a_failing_worker_stops_the_run_and_its_error_is_returned() {
        for (workers, bad) in [(2, vec![41]), (3, vec![60, 58]), (4, vec![7, 9, 10])] {
            let mut seen = Vec::new();
            let result = std::thread::scope(|scope| {
                let mut next = 0u64;
                let (mut p, q) = Pipeline::source(scope, "endless", 1, move || {
                    next += 1;
                    Ok(Some(next))
                });
                let q = p.stage_in_turn(scope, "check", 1, q, workers, |_, x| {
                    if bad.contains(&x) {
                        // The later bad item fails first.
                        std::thread::sleep(Duration::from_millis(if x == bad[0] { 0 } else { 5 }));
                        return Err(format!("item {x} is bad"));
                    }
                    Ok(x)
                });
                let last = q.sink(|x| {
                    seen.push(x);
                    Ok(())
                });
                p.finish(("collect", last))
            });
            let first_bad = *bad.iter().min().unwrap();
            assert_eq!(result.unwrap_err(), format!("item {first_bad} is bad"), "{workers} workers");
            assert_eq!(seen, (1..first_bad).collect::<Vec<_>>());
        }
    }

    /// A fed run: the calling thread's stage comes first in the times and in error order; a
    /// middle stage and the last run on threads of their own.
    #[test]
    fn a_fed_run_keeps_order_and_its_first_stage_error_is_the_cause() {
        for fail_at in [None, Some(30u32)] {
            let mut seen = Vec::new();
            let result = std::thread::scope(|scope| {
                let (mut p, feed, q) = Pipeline::fed(1);
                let q = p.stage(scope, "square", 2, q, |x: u32| Ok(x * x));
                p.sink_on_thread(scope, "collect", q, |x| {
                    seen.push(x);
                    Ok(())
                });
                let mut next = 0u32;
                let fed = feed.run(&mut || {
                    next += 1;
                    if Some(next) == fail_at {
                        return Err(format!("item {next} unreadable"));
                    }
                    Ok((next <= 100).then_some(next))
                });
                p.finish_fed(("count", fed))
            });
            match fail_at {
                None => {
                    let names: Vec<_> = result.unwrap().iter().map(|(n, t)| (*n, t.items)).collect();
                    assert_eq!(names, [("count", 100), ("square", 100), ("collect", 100)]);
                    assert_eq!(seen, (1..=100).map(|x| x * x).collect::<Vec<_>>());
                }
                Some(at) => {
                    assert_eq!(result.unwrap_err(), format!("item {at} unreadable"));
                    assert_eq!(seen, (1..at).map(|x| x * x).collect::<Vec<_>>());
                }
            }
        }
    }

    /// Windows of work on a pool come out in the items' order, and the first error (in that
    /// order) ends the run with what came before it passed on; this holds on a pool of one
    /// thread whose thread hosts the run, the case that `run_here` exists for.
    #[test]
    fn windows_on_a_pool_keep_the_items_order() {
        for threads in [1, 4] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let slow_on_some = |x: u32| {
                if x % 4 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
                if x == 90 { Err(format!("item {x} failed")) } else { Ok(x * 10) }
            };
            let mut seen = Vec::new();
            let result = pool.install(|| {
                let mut produce = in_order_windows(&pool, (0..100).collect(), slow_on_some);
                run_here(
                    ("work", &mut produce),
                    4,
                    ("collect", &mut |x| {
                        seen.push(x);
                        Ok(())
                    }),
                )
            });
            assert_eq!(result.unwrap_err(), "item 90 failed");
            assert_eq!(seen, (0..90).map(|x| x * 10).collect::<Vec<_>>());
            let mut produce = in_order_windows(&pool, (0..10).collect(), Ok::<u32, String>);
            let times = pool.install(|| run_here(("work", &mut produce), 4, ("collect", &mut |_| Ok(())))).unwrap();
            assert_eq!(times[0].1.items, 10);
            assert_eq!(times[1].1.items, 10);
        }
    }

    /// A producer on a thread of `scope` that makes the items 0..200, each only while it holds a
    /// token (two to start with, more given back on the returned sender: as a GPU waits for a
    /// buffer), and the stage's `next` for them.
    fn tokened_producer<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
    ) -> (impl FnMut(bool) -> Option<u32> + Send + 'scope, SyncSender<()>) {
        let (to_stage, arrivals) = sync_channel::<u32>(100);
        let (give_back, tokens) = sync_channel::<()>(100);
        give_back.send(()).unwrap();
        give_back.send(()).unwrap();
        scope.spawn(move || {
            for x in 0..200 {
                if tokens.recv().is_err() || to_stage.send(x).is_err() {
                    return;
                }
            }
        });
        let next = move |wait: bool| {
            use std::sync::mpsc::RecvTimeoutError::Disconnected;
            if !wait {
                return arrivals.try_recv().ok();
            }
            match arrivals.recv_timeout(Duration::from_secs(20)) {
                Ok(x) => Some(x),
                Err(Disconnected) => None,
                Err(e) => panic!("the stage and the producer wait for each other ({e})"),
            }
        };
        (next, give_back)
    }

    /// Items that arrive from another thread, which makes the next one only once an earlier one
    /// has been worked on (as a GPU waits for a buffer a finished shard gives back): the streaming
    /// stage does not wait for more items while holding the ones the producer waits for, at any
    /// pool size, the caller on the pool or not, and the results keep the items' order.
    #[test]
    fn streamed_items_keep_their_order_and_never_wait_on_the_producer() {
        for (threads, on_pool) in [(1, true), (1, false), (3, true), (8, false)] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let lanes = Lanes::new(threads, 2, "test").unwrap();
            let mut seen = Vec::new();
            let result = std::thread::scope(|scope| {
                let (mut next, give_back) = tokened_producer(scope);
                // The token goes back once an item is worked on, as a shard's buffer does.
                let work = |x: u32| {
                    let _ = give_back.send(());
                    Ok::<u32, String>(x + 1)
                };
                let mut write = |x| {
                    seen.push(x);
                    Ok(())
                };
                let mut run = || run_here_streaming(&lanes, ("finish", &mut next), &work, 1, ("write", &mut write));
                if on_pool { pool.install(run) } else { run() }
            });
            assert_eq!(result.unwrap()[1].1.items, 200);
            assert_eq!(seen, (1..=200).collect::<Vec<_>>());
        }
    }

    /// Each item's parallel work runs on the threads of one lane, which holds that one item
    /// meanwhile: a thread waiting inside an item's join never takes up another item. A panic in
    /// an item's work reaches the caller instead of leaving the stage waiting for its result.
    #[test]
    fn an_items_parallel_work_stays_in_its_lane() {
        use rayon::prelude::*;
        use std::sync::atomic::{AtomicBool, Ordering};
        let lanes = Lanes::new(7, 4, "lane-test").unwrap();
        assert_eq!((lanes.pools.len(), lanes.threads()), (2, 7));
        let lane_of = || {
            let name = std::thread::current().name().unwrap().to_string();
            name.strip_prefix("lane-test-").unwrap().split('-').next().unwrap().parse::<usize>().unwrap()
        };
        let busy = [AtomicBool::new(false), AtomicBool::new(false)];
        let work = |x: u32| {
            let lane = lane_of();
            assert!(!busy[lane].swap(true, Ordering::SeqCst), "lane {lane} took item {x} while busy");
            let lanes_seen: Vec<usize> = (0..64)
                .into_par_iter()
                .map(|_| {
                    std::thread::sleep(Duration::from_micros(200));
                    lane_of()
                })
                .collect();
            busy[lane].store(false, Ordering::SeqCst);
            assert!(lanes_seen.iter().all(|&l| l == lane), "item {x} ran on lanes {lanes_seen:?}");
            if x == 33 {
                panic!("item {x} panicked");
            }
            Ok::<u32, String>(x)
        };
        let mut items = 0..40u32;
        let mut next = move |_wait: bool| items.next();
        let mut seen = Vec::new();
        let mut write = |x| {
            seen.push(x);
            Ok(())
        };
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_here_streaming(&lanes, ("work", &mut next), &work, 2, ("collect", &mut write))
        }));
        let panic = run.expect_err("item 33's panic reaches the caller");
        assert_eq!(panic.downcast_ref::<String>().map(String::as_str), Some("item 33 panicked"));
        assert_eq!(seen, (0..33).collect::<Vec<_>>());
    }

    /// A slow item holds back the passing on of those after it, not their start; the first
    /// error in the items' order is the run's, after the items before it.
    #[test]
    fn a_slow_item_does_not_hold_back_the_start_of_the_next() {
        let lanes = Lanes::new(4, 1, "test").unwrap();
        let started: Vec<std::sync::Mutex<Option<Instant>>> = (0..20).map(|_| Default::default()).collect();
        let slow_done = std::sync::Mutex::new(None);
        let mut items = 0..20u32;
        let mut next = move |_wait: bool| items.next();
        let work = |x: u32| {
            *started[x as usize].lock().unwrap() = Some(Instant::now());
            if x == 0 {
                std::thread::sleep(Duration::from_millis(300));
                *slow_done.lock().unwrap() = Some(Instant::now());
            }
            if x == 15 { Err(format!("item {x} failed")) } else { Ok(x) }
        };
        let mut seen = Vec::new();
        let mut write = |x| {
            seen.push(x);
            Ok(())
        };
        let result = run_here_streaming(&lanes, ("work", &mut next), &work, 2, ("collect", &mut write));
        assert_eq!(result.unwrap_err(), "item 15 failed");
        assert_eq!(seen, (0..15).collect::<Vec<_>>());
        let slow_done = slow_done.lock().unwrap().unwrap();
        for (x, start) in started.iter().enumerate().take(4).skip(1) {
            assert!(start.lock().unwrap().unwrap() < slow_done, "item {x} waited for item 0");
        }
    }

    /// An error of the first stage or of the last ends the run and is returned.
    #[test]
    fn the_first_error_in_stage_order_is_the_runs() {
        let result = std::thread::scope(|scope| {
            let mut next = 0u32;
            let (p, q) = Pipeline::source(scope, "reads", 1, move || {
                next += 1;
                if next == 10 { Err("bad read".to_string()) } else { Ok(Some(next)) }
            });
            let last = q.sink(|_| Ok(()));
            p.finish(("write", last))
        });
        assert_eq!(result.unwrap_err(), "bad read");
        let result = std::thread::scope(|scope| {
            let (p, q) = Pipeline::source(scope, "reads", 1, || Ok(Some(1)));
            let last = q.sink(|_| Err("disk full".to_string()));
            p.finish(("write", last))
        });
        assert_eq!(result.unwrap_err(), "disk full");
    }
}
