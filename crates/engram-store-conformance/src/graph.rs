//! [`GraphStore`]: entities, relations, observations, their search memories, deletes that
//! cascade.

use engram_core::MemoryId;
use engram_core::store::graph::{
    Entity, GraphError, GraphLink, ObservationDeletion, ObservationInput, Relation,
};

use crate::{Engine, open, start_time};

fn entity(name: &str, kind: &str, observations: &[&str]) -> Entity {
    Entity {
        name: name.to_string(),
        entity_type: kind.to_string(),
        observations: observations.iter().map(|s| s.to_string()).collect(),
    }
}

fn relation(from: &str, to: &str, kind: &str) -> Relation {
    Relation {
        from: from.to_string(),
        to: to.to_string(),
        relation_type: kind.to_string(),
    }
}

/// An entity is created once per user (the first of several with one name wins, each
/// observation kept once, long ones too); another handle sees it; another user has a graph of
/// their own.
pub async fn entities_are_created_once_per_user(engine: &dyn Engine) {
    let (a, clock) = open(engine).await;
    let b = engine.open(clock).await;
    let now = start_time();
    let long = "x".repeat(50_000);
    let created = a
        .graph
        .create_entities(
            "u",
            &[
                entity("Alice", "person", &["likes tea", "likes tea", &long]),
                entity("Alice", "robot", &[]),
                entity("Bob", "person", &[]),
            ],
            now,
        )
        .await
        .unwrap();
    assert_eq!(
        created,
        [
            entity("Alice", "person", &["likes tea", &long]),
            entity("Bob", "person", &[])
        ]
    );
    assert!(
        b.graph
            .create_entities("u", &[entity("Alice", "x", &["new"])], now)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        b.graph
            .create_entities("v", &[entity("Alice", "cat", &[])], now)
            .await
            .unwrap()
            .len(),
        1
    );
    let read = b.graph.read_graph("u").await.unwrap();
    assert_eq!(
        read.entities,
        [
            entity("Alice", "person", &["likes tea", &long]),
            entity("Bob", "person", &[])
        ]
    );
    assert_eq!(
        a.graph.read_graph("v").await.unwrap().entities,
        [entity("Alice", "cat", &[])]
    );
    assert!(a.graph.read_graph("w").await.unwrap().entities.is_empty());
}

/// Observations go to existing entities only: if one entity is missing nothing is added; each
/// entity keeps one copy of each observation, in the order added.
pub async fn observations_need_an_existing_entity_and_all_or_nothing_is_added(engine: &dyn Engine) {
    let graph = open(engine).await.0.graph;
    let now = start_time();
    graph
        .create_entities("u", &[entity("A", "t", &["one"])], now)
        .await
        .unwrap();
    let err = graph
        .add_observations(
            "u",
            &[
                ObservationInput {
                    entity_name: "A".into(),
                    contents: vec!["two".into()],
                },
                ObservationInput {
                    entity_name: "B".into(),
                    contents: vec!["x".into()],
                },
            ],
            now,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, GraphError::EntityNotFound(_)));
    assert_eq!(err.to_string(), "Entity with name B not found");
    assert_eq!(
        graph.read_graph("u").await.unwrap().entities[0].observations,
        ["one"]
    );
    let added = graph
        .add_observations(
            "u",
            &[ObservationInput {
                entity_name: "A".into(),
                contents: vec!["one".into(), "two".into(), "three".into(), "two".into()],
            }],
            now,
        )
        .await
        .unwrap();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].entity_name, "A");
    assert_eq!(added[0].added_observations, ["two", "three"]);
    assert_eq!(
        graph.read_graph("u").await.unwrap().entities[0].observations,
        ["one", "two", "three"]
    );
    // Another user's entity of the same name is not this user's.
    assert!(matches!(
        graph
            .add_observations(
                "v",
                &[ObservationInput {
                    entity_name: "A".into(),
                    contents: vec!["x".into()],
                }],
                now,
            )
            .await,
        Err(GraphError::EntityNotFound(_))
    ));
}

/// Relations are created once; opening nodes gives the named entities (each once, unknown
/// ones skipped) and every relation touching any of them, oldest first.
pub async fn open_nodes_returns_relations_touching_any_requested_node(engine: &dyn Engine) {
    let graph = open(engine).await.0.graph;
    let now = start_time();
    graph
        .create_entities(
            "u",
            &[
                entity("A", "t", &[]),
                entity("B", "t", &[]),
                entity("C", "t", &[]),
            ],
            now,
        )
        .await
        .unwrap();
    let created = graph
        .create_relations(
            "u",
            &[
                relation("A", "B", "r"),
                relation("B", "C", "r"),
                relation("A", "B", "r"),
                relation("C", "A", "r"),
            ],
            now,
        )
        .await
        .unwrap();
    assert_eq!(created.len(), 3);
    assert!(
        graph
            .create_relations("u", &[relation("A", "B", "r")], now)
            .await
            .unwrap()
            .is_empty()
    );
    let opened = graph
        .open_nodes("u", &["C".into(), "A".into(), "A".into(), "nope".into()])
        .await
        .unwrap();
    assert_eq!(
        opened.entities,
        [entity("C", "t", &[]), entity("A", "t", &[])]
    );
    assert_eq!(
        opened.relations,
        [
            relation("A", "B", "r"),
            relation("B", "C", "r"),
            relation("C", "A", "r")
        ]
    );
    graph
        .delete_relations("u", &[relation("A", "B", "r"), relation("X", "Y", "r")])
        .await
        .unwrap();
    assert_eq!(
        graph
            .open_nodes("u", &["A".into()])
            .await
            .unwrap()
            .relations,
        [relation("C", "A", "r")]
    );
    assert_eq!(graph.read_graph("u").await.unwrap().relations.len(), 2);
    assert!(graph.read_graph("v").await.unwrap().relations.is_empty());
}

/// Every entity and observation waits for its search memory until one is recorded (by any
/// handle); memories map back to what they stand for, for their user only; deleting an
/// observation returns its memory.
pub async fn search_memories_are_linked_back_to_their_rows(engine: &dyn Engine) {
    let (a, clock) = open(engine).await;
    let b = engine.open(clock).await;
    let now = start_time();
    a.graph
        .create_entities(
            "u",
            &[entity("A", "t", &["a1", "a2"]), entity("B", "s", &[])],
            now,
        )
        .await
        .unwrap();
    let pending = b.graph.pending_index("u", 100).await.unwrap();
    assert_eq!(pending.len(), 4);
    assert!(b.graph.pending_index("v", 100).await.unwrap().is_empty());
    let observation = pending
        .iter()
        .find(|p| p.observation.as_deref() == Some("a2"))
        .unwrap();
    assert_eq!(observation.entity_name, "A");
    assert_eq!(observation.entity_type, "t");
    let links: Vec<_> = pending
        .iter()
        .map(|p| (p.target, MemoryId::new()))
        .collect();
    assert!(a.graph.set_index(&links).await.unwrap().is_empty());
    assert!(b.graph.pending_index("u", 100).await.unwrap().is_empty());
    let ids: Vec<MemoryId> = links.iter().map(|(_, m)| *m).collect();
    let found = b.graph.links("u", &ids).await.unwrap();
    assert_eq!(found.len(), 4);
    assert!(
        found
            .values()
            .any(|l| *l == GraphLink::Entity { name: "B".into() })
    );
    assert!(found.values().any(|l| *l
        == GraphLink::Observation {
            name: "A".into(),
            content: "a1".into()
        }));
    assert!(b.graph.links("v", &ids).await.unwrap().is_empty());
    assert!(
        b.graph
            .links("u", &[MemoryId::new()])
            .await
            .unwrap()
            .is_empty()
    );

    let orphaned = a
        .graph
        .delete_observations(
            "u",
            &[ObservationDeletion {
                entity_name: "A".into(),
                observations: vec!["a1".into(), "zz".into()],
            }],
        )
        .await
        .unwrap();
    let a1 = found
        .iter()
        .find(|(_, l)| matches!(l, GraphLink::Observation { content, .. } if content == "a1"))
        .map(|(id, _)| *id)
        .unwrap();
    assert_eq!(orphaned, [a1]);
    assert_eq!(
        b.graph.read_graph("u").await.unwrap().entities[0].observations,
        ["a2"]
    );

    // A row deleted before its memory was recorded: the memory stands for nothing.
    a.graph
        .create_entities("u", &[entity("C", "t", &[])], now)
        .await
        .unwrap();
    let pending = a.graph.pending_index("u", 100).await.unwrap();
    assert_eq!(pending.len(), 1);
    b.graph.delete_entities("u", &["C".into()]).await.unwrap();
    let late = MemoryId::new();
    assert_eq!(
        a.graph
            .set_index(&[(pending[0].target, late)])
            .await
            .unwrap(),
        [late]
    );
}

/// Deleting an entity takes its observations and every relation starting or ending at it, and
/// returns the search memories that now stand for nothing; unknown names are ignored.
pub async fn deleting_an_entity_takes_its_relations_and_returns_its_memories(engine: &dyn Engine) {
    let graph = open(engine).await.0.graph;
    let now = start_time();
    graph
        .create_entities(
            "u",
            &[entity("A", "t", &["a1"]), entity("B", "t", &[])],
            now,
        )
        .await
        .unwrap();
    graph
        .create_relations(
            "u",
            &[
                relation("A", "B", "knows"),
                relation("B", "C", "knows"),
                relation("B", "A", "likes"),
            ],
            now,
        )
        .await
        .unwrap();
    let pending = graph.pending_index("u", 100).await.unwrap();
    assert_eq!(pending.len(), 3);
    let links: Vec<_> = pending
        .iter()
        .map(|p| (p.target, MemoryId::new()))
        .collect();
    graph.set_index(&links).await.unwrap();
    let mut expected: Vec<MemoryId> = links
        .iter()
        .zip(&pending)
        .filter(|(_, p)| p.entity_name == "A")
        .map(|((_, m), _)| *m)
        .collect();
    expected.sort();
    assert_eq!(expected.len(), 2);
    let mut orphaned = graph
        .delete_entities("u", &["A".into(), "Z".into()])
        .await
        .unwrap();
    orphaned.sort();
    assert_eq!(orphaned, expected);
    let read = graph.read_graph("u").await.unwrap();
    assert_eq!(read.entities, [entity("B", "t", &[])]);
    assert_eq!(read.relations, [relation("B", "C", "knows")]);
    assert!(graph.links("u", &expected).await.unwrap().is_empty());
    // A recreated entity starts afresh.
    graph
        .create_entities("u", &[entity("A", "new", &[])], now)
        .await
        .unwrap();
    assert_eq!(
        graph.open_nodes("u", &["A".into()]).await.unwrap().entities,
        [entity("A", "new", &[])]
    );
}

/// Empty or oversized names, types and observations, and any with a NUL character, are
/// refused and nothing is written.
pub async fn invalid_input_is_refused_before_writing(engine: &dyn Engine) {
    let graph = open(engine).await.0.graph;
    let now = start_time();
    let too_long = "n".repeat(engram_core::store::graph::MAX_NAME_BYTES + 1);
    for entities in [
        vec![entity("ok", "t", &[]), entity(" ", "t", &[])],
        vec![entity("A", "t", &["  "])],
        vec![entity(&too_long, "t", &[])],
        vec![entity("A\0", "t", &[])],
        vec![entity("A", "t\0", &[])],
        vec![entity("A", "t", &["x\0y"])],
    ] {
        assert!(matches!(
            graph.create_entities("u", &entities, now).await,
            Err(GraphError::Invalid(_))
        ));
    }
    for bad in [relation("A", "", "r"), relation("A", "B", "r\0")] {
        assert!(matches!(
            graph.create_relations("u", &[bad], now).await,
            Err(GraphError::Invalid(_))
        ));
    }
    graph
        .create_entities("u", &[entity("ok", "t", &[])], now)
        .await
        .unwrap();
    assert!(matches!(
        graph
            .add_observations(
                "u",
                &[ObservationInput {
                    entity_name: "ok".into(),
                    contents: vec!["fine".into(), "not\0fine".into()],
                }],
                now,
            )
            .await,
        Err(GraphError::Invalid(_))
    ));
    let read = graph.read_graph("u").await.unwrap();
    assert_eq!(read.entities, [entity("ok", "t", &[])]);
    assert!(read.relations.is_empty());
}
