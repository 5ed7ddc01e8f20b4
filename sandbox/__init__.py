"""Local stand-ins for Feishu and Claude, plus event builders, so the bot runs and is tested offline."""
