//! JSON-RPC message shapes: ids, what the child sends us, and what we send it.

use std::fmt;

use serde_json::{Map, Value};

use super::members::{request_id, RawMembers};

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

/// One line from the child, classified by its top-level members. Members are still JSON text:
/// decoding them is left to the caller, which weighs them first.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Message<'a> {
    /// The answer to one of our requests: the text of its `result`, or of its `error`.
    Response {
        id: RequestId,
        outcome: Result<&'a str, &'a str>,
    },
    /// A message with a `method` and no `id`.
    Notification {
        method: String,
        params: Option<&'a str>,
    },
    /// A message with a `method` and a valid `id`: the child waits for our answer.
    Request {
        id: RequestId,
        method: String,
        params: Option<&'a str>,
    },
    /// A message with a `method` and an `id` that is neither a string nor an integer
    /// (`null`, `[7]`): a request we cannot answer by its id, so it gets JSON-RPC's
    /// "Invalid Request" error with a `null` id, as the specification says.
    InvalidRequest,
}

impl<'a> Message<'a> {
    /// Classifies one line; `None` for anything that is not a JSON-RPC message.
    ///
    /// A line with a `method` is a request or notification even if its id equals one of
    /// ours: the child's requests share the id space of our requests by coincidence only.
    pub(crate) fn classify(line: &'a [u8]) -> Option<Message<'a>> {
        let members = RawMembers::read(line)?;
        if let Some(method) = members.method {
            let method = serde_json::from_str::<String>(method).ok()?;
            let params = members.params;
            return Some(match members.id {
                None => Message::Notification { method, params },
                Some(id) => match request_id(id) {
                    Some(id) => Message::Request { id, method, params },
                    None => Message::InvalidRequest,
                },
            });
        }
        let id = request_id(members.id?)?;
        // A `null` error beside a result is how some servers say "no error" (JSON-RPC
        // asks for one member or the other, but a serializer with both fields
        // optional writes both): it is a result. A `null` error alone stays an error
        // outcome, so that the request it answers still fails at once.
        let outcome = match (members.error, members.result) {
            (Some("null"), Some(result)) => Ok(result),
            (Some(error), _) => Err(error),
            (None, Some(result)) => Ok(result),
            (None, None) => return None,
        };
        Some(Message::Response { id, outcome })
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

/// Composes an outgoing message from its members, leaving out `params` when it is `null`
/// (JSON-RPC allows only an object or an array there, so absence is the only way to
/// send "no params") and `"jsonrpc":"2.0"` when `jsonrpc_version` is false (Codex's
/// app-server protocol omits it).
pub(crate) fn compose(jsonrpc_version: bool, members: Vec<(&str, Value)>) -> Value {
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
        let line = request.to_string();
        assert_eq!(
            Message::classify(line.as_bytes()),
            Some(Message::Request {
                id: RequestId::Integer(1),
                method: "item/approve".to_string(),
                params: Some("{}"),
            })
        );
    }

    #[test]
    fn an_id_without_result_or_error_is_not_a_response() {
        assert!(!response_id_matches(&json!({"id": 1}), &1.into()));
        assert_eq!(Message::classify(br#"{"id":1}"#), None);
    }

    #[test]
    fn classify_sorts_every_shape() {
        let cases: [(&[u8], Option<Message<'_>>); 8] = [
            (
                br#"{"id":1,"result":{"ok":true},"error":null}"#,
                Some(Message::Response {
                    id: RequestId::Integer(1),
                    outcome: Ok(r#"{"ok":true}"#),
                }),
            ),
            (
                br#"{"id":1,"error":null}"#,
                Some(Message::Response {
                    id: RequestId::Integer(1),
                    outcome: Err("null"),
                }),
            ),
            (
                br#"{"method":"turn/started","params":{"n":1}}"#,
                Some(Message::Notification {
                    method: "turn/started".to_string(),
                    params: Some(r#"{"n":1}"#),
                }),
            ),
            (
                br#"{"id":"a","result":null}"#,
                Some(Message::Response {
                    id: RequestId::from("a"),
                    outcome: Ok("null"),
                }),
            ),
            (
                br#"{"id":2,"error":{"code":-1,"message":"no"},"result":1}"#,
                Some(Message::Response {
                    id: RequestId::Integer(2),
                    outcome: Err(r#"{"code":-1,"message":"no"}"#),
                }),
            ),
            (
                br#"{"id":null,"method":"x"}"#,
                Some(Message::InvalidRequest),
            ),
            (br#"{"id":[7],"method":"x"}"#, Some(Message::InvalidRequest)),
            (
                br#"{"method":"x","id":"q"}"#,
                Some(Message::Request {
                    id: RequestId::from("q"),
                    method: "x".to_string(),
                    params: None,
                }),
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(Message::classify(line), expected, "{:?}", line);
        }
        for junk in [
            &b"not json"[..],
            b"[1,2]",
            b"\"text\"",
            br#"{"id":null,"result":1}"#,
            br#"{"id":1.5,"result":1}"#,
            br#"{"method":7}"#,
        ] {
            assert_eq!(Message::classify(junk), None, "{:?}", junk);
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
    fn compose_omits_null_params_and_optionally_the_version() {
        let with_version = compose(
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
        let without_version = compose(
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
