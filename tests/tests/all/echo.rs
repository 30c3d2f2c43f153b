use moat_tests::{call, load, plugins, text};
use serde_json::json;

#[tokio::test]
async fn echo_returns_its_input() {
    let echo = load("echo", plugins::ECHO);
    let result = call(&echo, "echo_echo", json!({"message": "héllo ✓"})).await;
    assert_eq!(text(&result), "héllo ✓");
    assert_eq!(result.structured_content, None, "a string is text alone");
}

#[tokio::test]
async fn repeat_uses_the_optional_separator() {
    let echo = load("echo", plugins::ECHO);
    let joined = call(
        &echo,
        "echo_repeat",
        json!({"message": "ab", "times": 3, "separator": "-"}),
    )
    .await;
    assert_eq!(text(&joined), "ab-ab-ab");
    let plain = call(&echo, "echo_repeat", json!({"message": "ab", "times": 2})).await;
    assert_eq!(text(&plain), "abab");
}
