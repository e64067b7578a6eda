package subjects

// State operations of the skill catalogue and agent versions (registry →
// state; bus.v1 skill.proto).
const (
	StatePutSkill    = "skill.put"
	StateGetSkill    = "skill.get"
	StateListSkills  = "skill.list"
	StateDeleteSkill = "skill.delete"
	// StateResolveSkills answers the skills an agent of an org offers (its
	// effective settings, and the check that an agent names known skills).
	StateResolveSkills = "skill.resolve"
	// StateAgentVersions lists an agent's recorded versions.
	StateAgentVersions = "agent.versions"
)

// Registry operations of the skill catalogue: they carry
// agentmesh.bus.v1.SkillOp (the org acted for and the public API's
// request). agents.versions carries an AgentOp with versions set.
const (
	RegistryCreateSkill   = "skills.create"
	RegistryGetSkill      = "skills.get"
	RegistryListSkills    = "skills.list"
	RegistryUpdateSkill   = "skills.update"
	RegistryDeleteSkill   = "skills.delete"
	RegistryAgentVersions = "agents.versions"
)
