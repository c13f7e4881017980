//! JSON-RPC message shapes: ids, what the child sends us, and what we send it.

use std::fmt;

use serde_json::{Map, Value};

use super::AppServerError;

/// The id of a JSON-RPC request: a JSON string or integer.
///
/// Ids compare the way JSON values do, so `RequestId::from("1")` never matches a
/// response whose id is the number `1`. Ids that are neither strings nor integers
/// (`null`, fractions) are not accepted: the JSON-RPC specification discourages them and
/// no app-server uses them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RequestId {
    /// A numeric id such as `7`.
    Integer(i64),
    /// A string id such as `"init-1"`.
    String(String),
}

impl RequestId {
    /// Reads an id from the `id` member of a message, if it is a string or an integer
    /// that fits in `i64`.
    pub fn from_json(value: &Value) -> Option<Self> {
        match value {
            Value::String(id) => Some(RequestId::String(id.clone())),
            Value::Number(id) => id.as_i64().map(RequestId::Integer),
            _ => None,
        }
    }

    /// Whether `value` is the JSON form of this id.
    fn is(&self, value: &Value) -> bool {
        match (self, value) {
            (RequestId::Integer(id), Value::Number(other)) => other.as_i64() == Some(*id),
            (RequestId::String(id), Value::String(other)) => id == other,
            _ => false,
        }
    }
}

impl fmt::Display for RequestId {
    /// Writes the id without JSON quoting: `init-1`, `7`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Integer(id) => write!(f, "{}", id),
            RequestId::String(id) => f.write_str(id),
        }
    }
}

impl From<i64> for RequestId {
    fn from(id: i64) -> Self {
        RequestId::Integer(id)
    }
}

impl From<&str> for RequestId {
    fn from(id: &str) -> Self {
        RequestId::String(id.to_string())
    }
}

impl From<String> for RequestId {
    fn from(id: String) -> Self {
        RequestId::String(id)
    }
}

impl From<RequestId> for Value {
    fn from(id: RequestId) -> Self {
        match id {
            RequestId::Integer(id) => Value::from(id),
            RequestId::String(id) => Value::String(id),
        }
    }
}

/// A message the child sent on its own initiative, rather than as a response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incoming {
    /// A message with a `method` and no `id`; it expects no answer.
    Notification {
        /// The `method` member, such as `turn/completed`.
        method: String,
        /// The `params` member, or `Value::Null` if there was none.
        params: Value,
    },
    /// A message with a `method` and an `id` (an approval prompt, for example): the child
    /// waits for an answer, which is given with
    /// [`AppServerClient::respond`](super::AppServerClient::respond) or
    /// [`respond_error`](super::AppServerClient::respond_error).
    Request {
        /// The child's id for this request; answer with the same id.
        id: RequestId,
        /// The `method` member.
        method: String,
        /// The `params` member, or `Value::Null` if there was none.
        params: Value,
    },
}

impl Incoming {
    /// The `method` member of either kind of message.
    pub fn method(&self) -> &str {
        match self {
            Incoming::Notification { method, .. } | Incoming::Request { method, .. } => method,
        }
    }
}

/// One line from the child, classified.
#[derive(Debug)]
pub(crate) enum Message {
    /// The answer to one of our requests: its result, or the error object it carried.
    Response {
        id: RequestId,
        outcome: Result<Value, AppServerError>,
    },
    Incoming(Incoming),
}

impl Message {
    /// Classifies one line; `None` for anything that is not a JSON-RPC message.
    ///
    /// A line with a `method` is a request or notification even if its id equals one of
    /// ours: the child's requests share the id space of our requests by coincidence only.
    pub(crate) fn parse(line: &[u8]) -> Option<Message> {
        let mut object = match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(object)) => object,
            _ => return None,
        };
        let id = object.get("id").map(RequestId::from_json);
        if let Some(Value::String(method)) = object.remove("method") {
            let params = object.remove("params").unwrap_or(Value::Null);
            return Some(Message::Incoming(match id {
                None => Incoming::Notification { method, params },
                Some(id) => Incoming::Request {
                    id: id?,
                    method,
                    params,
                },
            }));
        }
        let id = id??;
        if let Some(error) = object.get("error") {
            let outcome = Err(AppServerError::from_error_object(error));
            return Some(Message::Response { id, outcome });
        }
        let result = object.remove("result")?;
        Some(Message::Response {
            id,
            outcome: Ok(result),
        })
    }
}

/// Whether `response` is a JSON-RPC response (it has a `result` or an `error` and no
/// `method`) whose `id` is `id`.
pub fn response_id_matches(response: &Value, id: &RequestId) -> bool {
    let is_response = response.get("method").is_none()
        && (response.get("result").is_some() || response.get("error").is_some());
    is_response && response.get("id").map_or(false, |value| id.is(value))
}

/// The `error.message` string of a JSON-RPC error response, if it has one.
pub fn extract_json_error_message(response: &Value) -> Option<String> {
    response
        .get("error")?
        .get("message")?
        .as_str()
        .map(str::to_string)
}

/// Builds an outgoing message from its members, leaving out `params` when it is `null`
/// (JSON-RPC allows only an object or an array there, so absence is the only way to
/// send "no params") and `"jsonrpc":"2.0"` when `jsonrpc_version` is false (Codex's
/// app-server protocol omits it).
pub(crate) fn envelope(jsonrpc_version: bool, members: Vec<(&str, Value)>) -> Value {
    let mut object = Map::new();
    if jsonrpc_version {
        object.insert("jsonrpc".to_string(), Value::from("2.0"));
    }
    for (key, value) in members {
        if !(key == "params" && value.is_null()) {
            object.insert(key.to_string(), value);
        }
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn matches_equal_string_id() {
        let response = json!({"id": "init-123", "result": {}});
        assert!(response_id_matches(&response, &"init-123".into()));
    }

    #[test]
    fn rejects_different_id() {
        let response = json!({"id": "init-123", "result": {}});
        assert!(!response_id_matches(&response, &"init-456".into()));
    }

    #[test]
    fn rejects_message_without_id() {
        let response = json!({"method": "session/update", "params": {}});
        assert!(!response_id_matches(&response, &"init-123".into()));
    }

    #[test]
    fn string_and_integer_ids_never_match() {
        let numeric = json!({"id": 1, "result": {}});
        let textual = json!({"id": "1", "result": {}});
        assert!(!response_id_matches(&numeric, &"1".into()));
        assert!(!response_id_matches(&textual, &1.into()));
        assert!(response_id_matches(&numeric, &1.into()));
        assert!(!response_id_matches(
            &json!({"id": 1.0, "result": {}}),
            &1.into()
        ));
    }

    #[test]
    fn a_request_from_the_child_is_never_a_response() {
        let request = json!({"id": 1, "method": "item/approve", "params": {}});
        assert!(!response_id_matches(&request, &1.into()));
        match Message::parse(request.to_string().as_bytes()) {
            Some(Message::Incoming(Incoming::Request { id, method, .. })) => {
                assert_eq!(id, RequestId::Integer(1));
                assert_eq!(method, "item/approve");
            }
            other => panic!("expected a request, got {:?}", other),
        }
    }

    #[test]
    fn an_id_without_result_or_error_is_not_a_response() {
        assert!(!response_id_matches(&json!({"id": 1}), &1.into()));
        assert!(Message::parse(br#"{"id":1}"#).is_none());
    }

    #[test]
    fn parse_classifies_every_shape() {
        match Message::parse(br#"{"method":"turn/started","params":{"n":1}}"#) {
            Some(Message::Incoming(Incoming::Notification { method, params })) => {
                assert_eq!(method, "turn/started");
                assert_eq!(params, json!({"n": 1}));
            }
            other => panic!("expected a notification, got {:?}", other),
        }
        match Message::parse(br#"{"id":"a","result":null}"#) {
            Some(Message::Response { id, outcome }) => {
                assert_eq!(id, RequestId::from("a"));
                assert_eq!(outcome.unwrap(), Value::Null);
            }
            other => panic!("expected a response, got {:?}", other),
        }
        match Message::parse(br#"{"id":2,"error":{"code":-1,"message":"no"}}"#) {
            Some(Message::Response {
                id,
                outcome: Err(AppServerError::ErrorResponse { code, message, .. }),
            }) => {
                assert_eq!(id, RequestId::Integer(2));
                assert_eq!((code, message.as_str()), (-1, "no"));
            }
            other => panic!("expected an error response, got {:?}", other),
        }
        for junk in [
            &b"not json"[..],
            b"[1,2]",
            b"\"text\"",
            br#"{"id":null,"result":1}"#,
            br#"{"id":[1],"method":"x"}"#,
            br#"{"method":7}"#,
        ] {
            assert!(Message::parse(junk).is_none(), "{:?}", junk);
        }
    }

    #[test]
    fn extract_message_from_error_response() {
        let response =
            json!({"id": "req-1", "error": {"code": -32600, "message": "Invalid request"}});
        assert_eq!(
            extract_json_error_message(&response),
            Some("Invalid request".to_string())
        );
        assert_eq!(
            extract_json_error_message(&json!({"id": "req-1", "result": {}})),
            None
        );
        assert_eq!(
            extract_json_error_message(&json!({"id": "req-1", "error": {"code": -32600}})),
            None
        );
    }

    #[test]
    fn envelope_omits_null_params_and_optionally_the_version() {
        let with_version = envelope(
            true,
            vec![
                ("id", Value::from(RequestId::Integer(3))),
                ("method", Value::from("initialize")),
                ("params", Value::Null),
            ],
        );
        assert_eq!(
            with_version.to_string(),
            r#"{"id":3,"jsonrpc":"2.0","method":"initialize"}"#
        );
        let without_version = envelope(
            false,
            vec![
                ("method", Value::from("initialized")),
                ("params", json!({})),
            ],
        );
        assert_eq!(
            without_version.to_string(),
            r#"{"method":"initialized","params":{}}"#
        );
    }
}
