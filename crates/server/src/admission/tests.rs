//! Admission's unit tests: routes, gates, the LIFO queue and the layer.

use super::*;
use std::sync::atomic::AtomicU32;
use tokio::sync::oneshot;
use tower_layer::Layer;
use tower_service::Service;

#[test]
fn paths_are_classified_and_ping_is_a_read_like_get() {
    let data = |m: &str| route(&format!("/uuidmap.v1.UuidMap/{m}"));
    for m in ["Get", "BatchGet", "Stats", "Ping"] {
        assert_eq!(
            data(m),
            Route::Permit {
                class: Class::Read,
                streaming: false
            },
            "{m}"
        );
    }
    for m in ["Put", "Delete", "CompareAndSet", "Write", "SomethingNew"] {
        assert_eq!(
            data(m),
            Route::Permit {
                class: Class::Write,
                streaming: false
            },
            "{m}"
        );
    }
    assert_eq!(
        route("/uuidmap.v1.UuidMapAdmin/Snapshot"),
        Route::Permit {
            class: Class::Write,
            streaming: false
        }
    );
    assert_eq!(
        data("Scan"),
        Route::Permit {
            class: Class::Scan,
            streaming: true
        }
    );
    assert_eq!(data("WaitFor"), Route::LongPoll { streaming: false });
    assert_eq!(data("Lookup"), Route::LongPoll { streaming: true });
    assert_eq!(data("Watch"), Route::LongPoll { streaming: true });
    assert_eq!(route("/grpc.health.v1.Health/Check"), Route::Free);
    assert_eq!(
        route("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
        Route::Free
    );
}

/// An inner service whose calls finish when the test says so, and
/// which counts the calls it saw (the work done).
#[derive(Clone)]
struct Mock {
    calls: Arc<AtomicU32>,
    release: Arc<std::sync::Mutex<Vec<oneshot::Receiver<()>>>>,
}

impl Mock {
    fn new() -> Self {
        Mock {
            calls: Arc::new(AtomicU32::new(0)),
            release: Arc::default(),
        }
    }
    /// The next call runs until the returned sender is dropped or sent.
    fn hold_next(&self) -> oneshot::Sender<()> {
        let (tx, rx) = oneshot::channel();
        self.release.lock().unwrap().push(rx);
        tx
    }
}

impl Service<http::Request<&'static str>> for Mock {
    type Response = http::Response<String>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<&'static str>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let hold = self.release.lock().unwrap().pop();
        let name = *request.body();
        Box::pin(async move {
            if let Some(hold) = hold {
                let _ = hold.await;
            }
            Ok(http::Response::new(name.to_string()))
        })
    }
}

fn limits(permits: usize, queue: usize) -> AdmissionLimits {
    AdmissionLimits {
        read_permits: permits,
        read_queue: queue,
        write_permits: permits,
        write_queue: queue,
        scan_permits: permits,
        scan_queue: queue,
        max_long_polls: 2,
    }
}

fn request(
    method: &str,
    name: &'static str,
    timeout: Option<Duration>,
) -> http::Request<&'static str> {
    let mut r = http::Request::builder()
        .uri(format!("/uuidmap.v1.UuidMap/{method}"))
        .body(name)
        .unwrap();
    if let Some(timeout) = timeout {
        r.extensions_mut().insert(deadline::CallDeadline {
            arrived: tokio::time::Instant::now(),
            timeout,
        });
    }
    r
}

fn grpc_status(response: &http::Response<AdmittedBody<String>>) -> Option<tonic::Status> {
    tonic::Status::from_header_map(response.headers())
}

#[tokio::test]
async fn waiters_are_served_newest_first_and_a_full_queue_is_refused_at_once() {
    let mock = Mock::new();
    let admission = Arc::new(Admission::new(&limits(1, 2), Duration::from_secs(10)));
    let mut svc = AdmissionLayer::new(admission.clone()).layer(mock.clone());
    let hold = mock.hold_next();
    let first = tokio::spawn(svc.call(request("Put", "first", None)));
    tokio::task::yield_now().await;
    let older = tokio::spawn(svc.call(request("Put", "older", None)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let newer = tokio::spawn(svc.call(request("Put", "newer", None)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(admission.gate(Class::Write).sem.queued(), 2);
    // A third waiter does not fit: refused at once, never called.
    let full = svc.call(request("Put", "full", None)).await.unwrap();
    let status = grpc_status(&full).unwrap();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(
        status.message().contains("overloaded")
            && status.message().contains("2 write requests already wait"),
        "{}",
        status.message()
    );
    assert_eq!(mock.calls.load(Ordering::SeqCst), 1);
    // The newest waiter runs first; the older one still waits.
    let newer_hold = mock.hold_next();
    drop(hold);
    assert_eq!(first.await.unwrap().unwrap().into_body().inner, "first");
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(mock.calls.load(Ordering::SeqCst), 2);
    assert!(!older.is_finished());
    drop(newer_hold);
    assert_eq!(newer.await.unwrap().unwrap().into_body().inner, "newer");
    assert_eq!(older.await.unwrap().unwrap().into_body().inner, "older");
    assert_eq!(admission.gate(Class::Write).sem.available(), 1);
    assert_eq!(admission.gate(Class::Write).sem.queued(), 0);
}

#[tokio::test]
async fn a_call_whose_deadline_passes_while_queued_is_refused_and_never_run() {
    let mock = Mock::new();
    let admission = Arc::new(Admission::new(&limits(1, 4), Duration::from_secs(10)));
    let mut svc = AdmissionLayer::new(admission.clone()).layer(mock.clone());
    let hold = mock.hold_next();
    let running = tokio::spawn(svc.call(request("Put", "running", None)));
    tokio::task::yield_now().await;
    let started = tokio::time::Instant::now();
    let late = svc
        .call(request("Put", "late", Some(Duration::from_millis(50))))
        .await
        .unwrap();
    let waited = started.elapsed();
    let status = grpc_status(&late).unwrap();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    assert!(
        status.message().contains("it was not run"),
        "{}",
        status.message()
    );
    // It gave up before the caller's deadline (the answer must get back
    // in time), and the service never saw it.
    // (The bound is loose: a busy test machine may wake the timer late.)
    assert!(
        waited >= Duration::from_millis(40) && waited < Duration::from_millis(90),
        "{waited:?}"
    );
    assert_eq!(mock.calls.load(Ordering::SeqCst), 1);
    drop(hold);
    running.await.unwrap().unwrap();
    assert_eq!(admission.gate(Class::Write).sem.available(), 1);
    assert_eq!(admission.gate(Class::Write).sem.queued(), 0);
}

#[tokio::test]
async fn a_stream_holds_its_permit_until_the_body_ends_and_unary_calls_release_at_once() {
    use http_body::Body as _;
    let mock = Mock::new();
    let admission = Arc::new(Admission::new(&limits(1, 4), Duration::from_secs(10)));
    let mut svc = AdmissionLayer::new(admission.clone()).layer(mock.clone());
    let scans = &admission.gate(Class::Scan).sem;
    let reads = &admission.gate(Class::Read).sem;
    let get = svc.call(request("Get", "get", None)).await.unwrap();
    assert_eq!(
        reads.available(),
        1,
        "a unary call released with its response"
    );
    drop(get);
    let scan = svc.call(request("Scan", "scan", None)).await.unwrap();
    assert_eq!(scans.available(), 0, "the scan's stream is not over");
    let mut body = std::pin::pin!(scan.into_body());
    // Read the stream to its end: the permit goes back at the end,
    // without waiting for the body to be dropped.
    while std::future::poll_fn(|cx| body.as_mut().poll_frame(cx))
        .await
        .is_some()
    {}
    assert_eq!(scans.available(), 1);
    // A stream the client abandons releases when dropped.
    let scan = svc.call(request("Scan", "scan", None)).await.unwrap();
    assert_eq!(scans.available(), 0);
    drop(scan);
    assert_eq!(scans.available(), 1);
}

#[tokio::test]
async fn long_polls_have_their_own_cap_and_take_no_read_permit() {
    let mock = Mock::new();
    let admission = Arc::new(Admission::new(&limits(1, 1), Duration::from_secs(10)));
    let mut svc = AdmissionLayer::new(admission.clone()).layer(mock.clone());
    let holds = [mock.hold_next(), mock.hold_next()];
    let polls = [
        tokio::spawn(svc.call(request("WaitFor", "w1", None))),
        tokio::spawn(svc.call(request("Watch", "w2", None))),
    ];
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let over = svc.call(request("WaitFor", "w3", None)).await.unwrap();
    let status = grpc_status(&over).unwrap();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(
        status.message().contains("2 long polls"),
        "{}",
        status.message()
    );
    // Reads still run: the long polls hold no read permit.
    let get = svc.call(request("Get", "get", None)).await.unwrap();
    assert!(grpc_status(&get).is_none());
    drop(holds);
    for p in polls {
        drop(p.await.unwrap().unwrap());
    }
    assert_eq!(admission.long_polls.load(Ordering::SeqCst), 0);
    let again = svc.call(request("WaitFor", "w4", None)).await.unwrap();
    assert!(grpc_status(&again).is_none());
}

#[tokio::test]
async fn health_and_reflection_pass_without_admission() {
    let mock = Mock::new();
    let admission = Arc::new(Admission::new(&limits(1, 1), Duration::from_secs(10)));
    let mut svc = AdmissionLayer::new(admission.clone()).layer(mock.clone());
    let _holds = [mock.hold_next(), mock.hold_next(), mock.hold_next()];
    let mut calls = Vec::new();
    for path in [
        "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Check",
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    ] {
        let r = http::Request::builder().uri(path).body("h").unwrap();
        calls.push(tokio::spawn(svc.call(r)));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Three at once with one permit and a queue of one: none was held.
    assert_eq!(mock.calls.load(Ordering::SeqCst), 3);
}
