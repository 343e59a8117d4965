//! The chat-model abstraction and the message vocabulary (owned by the agent work).
