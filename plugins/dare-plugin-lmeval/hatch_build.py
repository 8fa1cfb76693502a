"""Build hook: put ``dare_lmeval.pth`` (the lm-eval registration hook, ``dare_lmeval._startup``) at the top
of the wheel, i.e. into site-packages, for regular and editable installs alike."""

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class PthHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        key = "force_include_editable" if version == "editable" else "force_include"
        build_data.setdefault(key, {})["src/dare_lmeval.pth"] = "dare_lmeval.pth"
