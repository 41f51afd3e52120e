//! gRPC server reflection, v1 and v1alpha, as the protocol specifies it,
//! and the catalog of the services this server answers.
//!
//! Why not the stock service (`tonic_reflection`): it ends the whole stream
//! with a NOT_FOUND status when a request names an unknown symbol or file.
//! The protocol answers such a request *in the stream*, with an
//! `error_response`, and keeps the stream open for the next request;
//! clients depend on that (grpcio's reflection descriptor pool turns the
//! in-stream answer into a `KeyError`, but a failed stream into an RPC
//! error). This module serves the protocol over the generated types of
//! `tonic_reflection`:
//!
//! - `list_services`: every service of the registered descriptor sets;
//! - `file_by_filename`, `file_containing_symbol`: the file, then those of
//!   its transitive dependencies not yet sent on this stream (as grpc-go
//!   does, so a client can build its pool from one answer);
//! - `all_extension_numbers_of_type`: no extensions, for a known message;
//! - anything unknown: `error_response` NOT_FOUND, naming what was asked;
//!   a request with no question: `error_response` INVALID_ARGUMENT.
//!
//! v1alpha is the same protocol under another package name, with the same
//! field numbers: a v1alpha request is re-read as v1, answered, and the
//! answer re-read as v1alpha. Reflection is not a hot path.
//!
//! [`Catalog`] also names the services and methods for the UNIMPLEMENTED
//! answer to an unknown method (see `transport_errors`).

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;

use prost::Message;
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorProto, FileDescriptorSet};
use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_reflection::pb::v1 as pb;
use tonic_reflection::pb::v1alpha as pb_alpha;

use pb::server_reflection_request::MessageRequest;
use pb::server_reflection_response::MessageResponse;

/// A service and its methods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    /// Fully qualified, e.g. `uuidmap.v1.UuidMap`.
    pub name: String,
    /// Method names, in declaration order.
    pub methods: Vec<String>,
}

/// The descriptors of everything this server serves, indexed for
/// reflection.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Encoded `FileDescriptorProto` by file name, with its dependencies.
    files: HashMap<String, (Vec<u8>, Vec<String>)>,
    /// Fully qualified symbol → the file that declares it.
    symbols: HashMap<String, String>,
    /// Fully qualified message names (the types extension questions name).
    messages: HashSet<String>,
    services: Vec<ServiceInfo>,
}

/// The descriptor sets of the server: our protocol, health, and reflection
/// itself.
pub fn server_descriptor_sets() -> [&'static [u8]; 4] {
    [
        uuidmap_proto::FILE_DESCRIPTOR_SET,
        tonic_health::pb::FILE_DESCRIPTOR_SET,
        pb::FILE_DESCRIPTOR_SET,
        pb_alpha::FILE_DESCRIPTOR_SET,
    ]
}

impl Catalog {
    /// Indexes encoded `FileDescriptorSet`s; the first file of a name wins.
    pub fn new(sets: &[&[u8]]) -> Result<Catalog, prost::DecodeError> {
        let mut catalog = Catalog::default();
        for set in sets {
            for file in FileDescriptorSet::decode(*set)?.file {
                catalog.add_file(file);
            }
        }
        Ok(catalog)
    }

    /// The catalog of this server.
    pub fn of_server() -> Catalog {
        Catalog::new(&server_descriptor_sets()).expect("the compiled-in descriptor sets decode")
    }

    /// The services, in registration order.
    pub fn services(&self) -> &[ServiceInfo] {
        &self.services
    }

    fn add_file(&mut self, file: FileDescriptorProto) {
        let name = file.name().to_string();
        if self.files.contains_key(&name) {
            return;
        }
        let package = file.package().to_string();
        let declare = |symbol: String, symbols: &mut HashMap<String, String>| {
            symbols.entry(symbol).or_insert_with(|| name.clone());
        };
        for message in &file.message_type {
            self.add_message(&package, message, &name);
        }
        for e in &file.enum_type {
            add_enum(&package, e, &name, &mut self.symbols);
        }
        for service in &file.service {
            let service_name = qualify(&package, service.name());
            declare(service_name.clone(), &mut self.symbols);
            for method in &service.method {
                declare(qualify(&service_name, method.name()), &mut self.symbols);
            }
            self.services.push(ServiceInfo {
                name: service_name,
                methods: service
                    .method
                    .iter()
                    .map(|m| m.name().to_string())
                    .collect(),
            });
        }
        let deps = file.dependency.clone();
        self.files.insert(name, (file.encode_to_vec(), deps));
    }

    fn add_message(&mut self, scope: &str, message: &DescriptorProto, file: &str) {
        let name = qualify(scope, message.name());
        self.messages.insert(name.clone());
        self.symbols
            .entry(name.clone())
            .or_insert_with(|| file.to_string());
        for field in &message.field {
            self.symbols
                .entry(qualify(&name, field.name()))
                .or_insert_with(|| file.to_string());
        }
        for oneof in &message.oneof_decl {
            self.symbols
                .entry(qualify(&name, oneof.name()))
                .or_insert_with(|| file.to_string());
        }
        for nested in &message.nested_type {
            self.add_message(&name, nested, file);
        }
        for e in &message.enum_type {
            add_enum(&name, e, file, &mut self.symbols);
        }
    }

    /// The answer to one reflection request; `sent`: the files already
    /// sent on this stream.
    fn answer(
        &self,
        request: &pb::ServerReflectionRequest,
        sent: &mut HashSet<String>,
    ) -> MessageResponse {
        match &request.message_request {
            None => error(
                Code::InvalidArgument,
                "the reflection request asks nothing: set one of file_by_filename, \
                 file_containing_symbol, file_containing_extension, \
                 all_extension_numbers_of_type or list_services"
                    .into(),
            ),
            Some(MessageRequest::ListServices(_)) => {
                MessageResponse::ListServicesResponse(pb::ListServiceResponse {
                    service: self
                        .services
                        .iter()
                        .map(|s| pb::ServiceResponse {
                            name: s.name.clone(),
                        })
                        .collect(),
                })
            }
            Some(MessageRequest::FileByFilename(file)) => match self.files.get(file) {
                Some(_) => self.files_from(file, sent),
                None => error(
                    Code::NotFound,
                    format!("this server has no proto file named {file:?}"),
                ),
            },
            Some(MessageRequest::FileContainingSymbol(symbol)) => {
                match self.symbols.get(symbol.trim_start_matches('.')) {
                    Some(file) => self.files_from(&file.clone(), sent),
                    None => error(
                        Code::NotFound,
                        format!("this server declares no symbol {symbol:?}"),
                    ),
                }
            }
            Some(MessageRequest::FileContainingExtension(e)) => error(
                Code::NotFound,
                format!(
                    "this server declares no extension {} of {:?} (it declares no extensions)",
                    e.extension_number, e.containing_type
                ),
            ),
            Some(MessageRequest::AllExtensionNumbersOfType(t)) => {
                let t = t.trim_start_matches('.');
                if self.messages.contains(t) {
                    MessageResponse::AllExtensionNumbersResponse(pb::ExtensionNumberResponse {
                        base_type_name: t.to_string(),
                        extension_number: Vec::new(),
                    })
                } else {
                    error(
                        Code::NotFound,
                        format!("this server declares no message type {t:?}"),
                    )
                }
            }
        }
    }

    /// `file`, then its transitive dependencies not in `sent`.
    fn files_from(&self, file: &str, sent: &mut HashSet<String>) -> MessageResponse {
        let mut out = Vec::new();
        let mut todo = vec![file.to_string()];
        let mut first = true;
        while let Some(name) = todo.pop() {
            // The file asked for is always sent, even if sent before.
            if !sent.insert(name.clone()) && !first {
                continue;
            }
            first = false;
            if let Some((bytes, deps)) = self.files.get(&name) {
                out.push(bytes.clone());
                todo.extend(deps.iter().cloned());
            }
        }
        MessageResponse::FileDescriptorResponse(pb::FileDescriptorResponse {
            file_descriptor_proto: out,
        })
    }
}

fn add_enum(
    scope: &str,
    e: &EnumDescriptorProto,
    file: &str,
    symbols: &mut HashMap<String, String>,
) {
    let name = qualify(scope, e.name());
    symbols.entry(name).or_insert_with(|| file.to_string());
    // Enum values are scoped beside their enum, as in C++.
    for value in &e.value {
        symbols
            .entry(qualify(scope, value.name()))
            .or_insert_with(|| file.to_string());
    }
}

fn qualify(scope: &str, name: &str) -> String {
    if scope.is_empty() {
        name.to_string()
    } else {
        format!("{scope}.{name}")
    }
}

fn error(code: Code, message: String) -> MessageResponse {
    MessageResponse::ErrorResponse(pb::ErrorResponse {
        error_code: code as i32,
        error_message: message,
    })
}

/// The answers of one stream: each request answered in turn, errors in the
/// stream.
fn answers<Q, A>(
    catalog: Arc<Catalog>,
    requests: Streaming<Q>,
    convert_in: fn(Q) -> Result<pb::ServerReflectionRequest, Status>,
    convert_out: fn(pb::ServerReflectionResponse) -> Result<A, Status>,
) -> AnswerStream<A>
where
    Q: Send + 'static,
    A: Send + 'static,
{
    let mut sent = HashSet::new();
    Box::pin(requests.map(move |request| {
        let request = convert_in(request?)?;
        let message_response = catalog.answer(&request, &mut sent);
        convert_out(pb::ServerReflectionResponse {
            valid_host: request.host.clone(),
            original_request: Some(request),
            message_response: Some(message_response),
        })
    }))
}

/// A stream of reflection answers.
pub type AnswerStream<A> = Pin<Box<dyn Stream<Item = Result<A, Status>> + Send>>;

/// Reflection v1 (`grpc.reflection.v1.ServerReflection`).
#[derive(Clone, Debug)]
pub struct ReflectionV1(pub Arc<Catalog>);

#[tonic::async_trait]
impl pb::server_reflection_server::ServerReflection for ReflectionV1 {
    type ServerReflectionInfoStream = AnswerStream<pb::ServerReflectionResponse>;

    async fn server_reflection_info(
        &self,
        request: Request<Streaming<pb::ServerReflectionRequest>>,
    ) -> Result<Response<Self::ServerReflectionInfoStream>, Status> {
        Ok(Response::new(answers(
            self.0.clone(),
            request.into_inner(),
            Ok,
            Ok,
        )))
    }
}

/// Reflection v1alpha (`grpc.reflection.v1alpha.ServerReflection`), which
/// grpcurl 1.8 speaks.
#[derive(Clone, Debug)]
pub struct ReflectionV1Alpha(pub Arc<Catalog>);

#[tonic::async_trait]
impl pb_alpha::server_reflection_server::ServerReflection for ReflectionV1Alpha {
    type ServerReflectionInfoStream = AnswerStream<pb_alpha::ServerReflectionResponse>;

    async fn server_reflection_info(
        &self,
        request: Request<Streaming<pb_alpha::ServerReflectionRequest>>,
    ) -> Result<Response<Self::ServerReflectionInfoStream>, Status> {
        Ok(Response::new(answers(
            self.0.clone(),
            request.into_inner(),
            reread,
            reread,
        )))
    }
}

/// A message re-read as its twin of the other reflection version (the
/// same fields under the same numbers).
fn reread<A: Message, B: Message + Default>(message: A) -> Result<B, Status> {
    B::decode(message.encode_to_vec().as_slice())
        .map_err(|e| Status::internal(format!("reflection v1alpha and v1 disagree: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(catalog: &Catalog, question: MessageRequest) -> MessageResponse {
        let request = pb::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(question),
        };
        catalog.answer(&request, &mut HashSet::new())
    }

    fn file_names(answer: &MessageResponse) -> Vec<String> {
        let MessageResponse::FileDescriptorResponse(files) = answer else {
            panic!("not files: {answer:?}");
        };
        files
            .file_descriptor_proto
            .iter()
            .map(|b| {
                FileDescriptorProto::decode(b.as_slice())
                    .unwrap()
                    .name()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn the_catalog_lists_every_service_with_its_methods() {
        let catalog = Catalog::of_server();
        let names: Vec<&str> = catalog.services().iter().map(|s| s.name.as_str()).collect();
        for s in [
            "uuidmap.v1.UuidMap",
            "uuidmap.v1.UuidMapAdmin",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
        ] {
            assert!(names.contains(&s), "{s} missing from {names:?}");
        }
        let data = &catalog.services()[0];
        assert!(data.methods.iter().any(|m| m == "BatchGet"), "{data:?}");
    }

    #[test]
    fn symbols_answer_with_their_file_and_unknown_ones_in_the_stream() {
        let catalog = Catalog::of_server();
        for symbol in [
            "uuidmap.v1.UuidMap",
            "uuidmap.v1.UuidMap.Get",
            ".uuidmap.v1.GetRequest",
            "grpc.health.v1.HealthCheckResponse.ServingStatus",
        ] {
            let files = file_names(&ask(
                &catalog,
                MessageRequest::FileContainingSymbol(symbol.into()),
            ));
            assert!(!files.is_empty(), "{symbol}");
        }
        for question in [
            MessageRequest::FileContainingSymbol("uuidmap.v1.Nope".into()),
            MessageRequest::FileByFilename("nope.proto".into()),
            MessageRequest::AllExtensionNumbersOfType("uuidmap.v1.Nope".into()),
            MessageRequest::FileContainingExtension(pb::ExtensionRequest {
                containing_type: "uuidmap.v1.GetRequest".into(),
                extension_number: 100,
            }),
        ] {
            match ask(&catalog, question.clone()) {
                MessageResponse::ErrorResponse(e) => {
                    assert_eq!(e.error_code, Code::NotFound as i32, "{question:?}");
                    assert!(!e.error_message.is_empty());
                }
                other => panic!("{question:?} answered {other:?}"),
            }
        }
    }

    #[test]
    fn a_file_comes_with_its_dependencies_once_per_stream() {
        // A set whose file b.proto imports a.proto.
        let a = FileDescriptorProto {
            name: Some("a.proto".into()),
            package: Some("t".into()),
            message_type: vec![DescriptorProto {
                name: Some("A".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let b = FileDescriptorProto {
            name: Some("b.proto".into()),
            package: Some("t".into()),
            dependency: vec!["a.proto".into()],
            message_type: vec![DescriptorProto {
                name: Some("B".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let set = FileDescriptorSet { file: vec![a, b] }.encode_to_vec();
        let catalog = Catalog::new(&[&set]).unwrap();
        let mut sent = HashSet::new();
        let request = |symbol: &str| pb::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(symbol.into())),
        };
        let first = catalog.answer(&request("t.B"), &mut sent);
        assert_eq!(file_names(&first), ["b.proto", "a.proto"]);
        let again = catalog.answer(&request("t.B"), &mut sent);
        assert_eq!(file_names(&again), ["b.proto"]);
        let known = catalog.answer(
            &pb::ServerReflectionRequest {
                host: String::new(),
                message_request: Some(MessageRequest::AllExtensionNumbersOfType("t.A".into())),
            },
            &mut sent,
        );
        assert!(matches!(
            known,
            MessageResponse::AllExtensionNumbersResponse(r) if r.base_type_name == "t.A"
        ));
    }
}
