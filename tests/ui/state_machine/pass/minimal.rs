//! The smallest machine, defaults everywhere, and the user's own derives kept.

use workflow_runtime::{StateMachineWorkflow, Workflow, state_machine};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Light {
    cycles: u32,
}

fn tired(light: &Light) -> bool {
    light.cycles > 3
}

#[state_machine(data = Light, initial = Red)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum TrafficLight {
    #[on(after(secs(30)) => Green)]
    Red,
    #[on(after(millis(25_000)) => Yellow)]
    Green,
    #[on(=> Off, when = tired)]
    #[on(after(millis(60_000 / 20)) => Red)]
    Yellow,
    Off,
}

fn main() {
    assert_eq!(TrafficLight::name(), "TrafficLight");
    assert_eq!(TrafficLight::TRIGGER_RED_0, "Red_0");
    assert_eq!(TrafficLight::TRIGGER_YELLOW_3, "Yellow_3");
    let mut seen = std::collections::BTreeSet::new();
    seen.insert(TrafficLight::Off);
    assert_eq!(TrafficLight::state_name(TrafficLight::Off), "Off");
    assert!(TrafficLight::registry().has_condition("tired"));
    assert!(TrafficLight::dot().contains("after 3s"));
}
