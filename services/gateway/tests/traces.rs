//! Traces across services, exported by OTLP to an in-process receiver:
//! - one HTTP append is one trace: the gateway's request, a request to each
//!   bookie of the write set, and on each bookie the wait for the journal's
//!   fdatasync, every span linked to its parent;
//! - an HTTP ledger create is one trace that reaches the metadata leader's
//!   Raft proposal.

use std::collections::HashMap;
use std::time::Duration;

use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_testkit::otlp::{OtlpReceiver, ReceivedSpan};
use quire_testkit::{http as call, TestCluster};

/// The chain of spans from `span` up to its trace's root (within `spans`).
fn ancestry<'a>(spans: &'a [ReceivedSpan], span: &'a ReceivedSpan) -> Vec<&'a ReceivedSpan> {
    let by_id: HashMap<&str, &ReceivedSpan> =
        spans.iter().filter(|s| s.trace_id == span.trace_id).map(|s| (s.span_id.as_str(), s)).collect();
    let mut out = vec![span];
    let mut at = span;
    while !at.parent_span_id.is_empty() {
        match by_id.get(at.parent_span_id.as_str()) {
            Some(p) => {
                out.push(p);
                at = p;
            }
            None => break,
        }
    }
    out
}

fn describe(spans: &[ReceivedSpan]) -> String {
    spans
        .iter()
        .map(|s| format!("{} {} {}<-{} {:?}\n", s.service, s.name, s.span_id, s.parent_span_id, s.attributes))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_append_is_one_trace_to_each_bookie_and_its_journal_and_a_create_reaches_the_raft_leader() {
    let receiver = OtlpReceiver::start().await.unwrap();
    let endpoint = receiver.endpoint.clone();
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    init_dir(&certs, "test", &LocalCluster { metadata: 3, bookies: 3 }, &IssueOptions::default()).unwrap();
    // Batches leave every 100 ms instead of every 5 s.
    let (cluster, gateway, http) = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || {
            let env = [("QUIRE_OTLP_ENDPOINT", endpoint.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "100")];
            let cluster =
                TestCluster::start_with_env(&dir, &certs, &["r1", "r2", "r3"], &["--lease-ms", "3000"], &env).unwrap();
            let (p, http) = cluster.start_gateway(&[]).unwrap();
            (cluster, p, http)
        }
    })
    .await
    .unwrap();

    let (created, appended) = tokio::task::spawn_blocking({
        let http = http.clone();
        move || {
            let (status, body) =
                call(&http, "POST", "/v1/ledgers", br#"{"ensemble":3,"write_quorum":3,"ack_quorum":2}"#);
            assert_eq!(status, 201, "{body}");
            let id: u64 =
                body.split("\"ledger_id\":").nth(1).unwrap().split([',', '}']).next().unwrap().parse().unwrap();
            let (status, body) = call(&http, "POST", &format!("/v1/ledgers/{id}/entries"), b"traced");
            assert_eq!(status, 200, "{body}");
            ("/v1/ledgers".to_string(), format!("/v1/ledgers/{id}/entries"))
        }
    })
    .await
    .unwrap();

    let root = |spans: &[ReceivedSpan], target: &str| {
        spans
            .iter()
            .find(|s| s.service == "quire-gateway" && s.name == "http.request" && s.attr("http.target") == Some(target))
            .cloned()
    };
    // The append: three bookies' request spans, each with its journal wait.
    let found = quire_testkit::eventually(Duration::from_secs(30), "the append's spans from every bookie", || {
        let spans = receiver.spans();
        let appended = appended.clone();
        async move {
            let http_span = root(&spans, &appended)?;
            let in_trace: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.trace_id == http_span.trace_id).collect();
            let journals: Vec<&&ReceivedSpan> =
                in_trace.iter().filter(|s| s.service == "quire-bookie" && s.name == "journal.append").collect();
            (journals.len() == 3).then(|| (spans.clone(), http_span))
        }
    })
    .await;
    let (spans, http_span) = found.unwrap_or_else(|e| {
        let gateway_spans: Vec<ReceivedSpan> =
            receiver.spans().into_iter().filter(|s| s.service == "quire-gateway").collect();
        panic!("{e}\n{}\n--- gateway log ---\n{}", describe(&gateway_spans), gateway.log())
    });
    let journals: Vec<&ReceivedSpan> =
        spans.iter().filter(|s| s.trace_id == http_span.trace_id && s.name == "journal.append").collect();
    let mut bookies_seen = Vec::new();
    for j in &journals {
        let chain = ancestry(&spans, j);
        let names: Vec<(&str, &str)> = chain.iter().map(|s| (s.service.as_str(), s.name.as_str())).collect();
        assert_eq!(
            names,
            vec![
                ("quire-bookie", "journal.append"),
                ("quire-bookie", "rpc.server"),
                ("quire-gateway", "bookie.add"),
                ("quire-gateway", "http.request"),
            ],
            "{}",
            describe(&spans)
        );
        assert_eq!(chain[3].span_id, http_span.span_id, "every branch ends at the HTTP request");
        bookies_seen.push(chain[2].attr("bookie").unwrap_or_default().to_string());
    }
    bookies_seen.sort();
    assert_eq!(bookies_seen, vec!["1", "2", "3"], "one branch per bookie of the write set");

    // The create: through the metadata service to the leader's Raft proposal.
    let create = root(&spans, &created).unwrap_or_else(|| panic!("no create span\n{}", describe(&spans)));
    let proposals = quire_testkit::eventually(Duration::from_secs(30), "the create's Raft proposal", || {
        let spans = receiver.spans();
        let trace = create.trace_id.clone();
        async move {
            let p: Vec<ReceivedSpan> = spans
                .iter()
                .filter(|s| s.trace_id == trace && s.service == "quire-metadata" && s.name == "raft.propose")
                .cloned()
                .collect();
            (!p.is_empty()).then_some((spans, p))
        }
    })
    .await;
    let (spans, proposals) = proposals.unwrap_or_else(|e| panic!("{e}\n{}", describe(&receiver.spans())));
    assert_eq!(proposals.len(), 1, "one proposal, on the leader");
    let chain = ancestry(&spans, &proposals[0]);
    assert_eq!(chain[1].name, "rpc.server");
    assert_eq!(chain[1].attr("method"), Some("create_ledger"));
    assert_eq!(chain.last().unwrap().span_id, create.span_id, "{}", describe(&spans));
    drop((cluster, gateway));
}
